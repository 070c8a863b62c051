"""Shared graph-building machinery of the model zoo: naming, weights, constants, scaling."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from search_space.exceptions import AutofusionError

OPSET = 17
IR_VERSION = 8
WEIGHT_INPUTS_KEY = "ai.autofusion.weight_inputs"
ZOO_KEY = "ai.autofusion.zoo"
INPUT_RANGES_KEY = "ai.autofusion.input_ranges"
WEIGHT_MODES = ("random", "inputs")
CACHE_FORMS = ("static", "concat")
# A ModelProto is one protobuf message, which cannot exceed 2 GiB; leave room for the graph.
MAX_EMBEDDED_BYTES = 2**31 - 2**27
FLOAT_MIN = float(np.finfo(np.float32).min)

Init = Literal["normal", "one", "var"]


class ZooError(AutofusionError, ValueError):
    """A zoo model was asked for with an unknown name or arguments outside their rules."""


def check(cond: bool, msg: str) -> None:
    """Raise `ZooError(msg)` unless `cond` holds."""
    if not cond:
        raise ZooError(msg)


@dataclass(frozen=True)
class BuildArgs:
    """Validated arguments of `search_space.zoo.build`, handed to each model's builder."""

    name: str
    weights: str
    scale: float
    layers: int | None
    batch: int | None
    seq_len: int | None
    seed: int
    cache_len: int | None = None
    cache_form: str = "static"

    def pick_layers(self, default: int, minimum: int = 1) -> int:
        """The `layers` override, else the default number of layers scaled."""
        if self.layers is not None:
            return self.layers
        return max(minimum, round(default * self.scale))

    def pick_batch(self, default: int) -> int:
        """The `batch` override, else the default batch scaled (at least 1)."""
        return self.batch if self.batch is not None else scaled(default, self.scale)

    def pick_seq(self, default: int, maximum: int) -> int:
        """The `seq_len` override (checked against `maximum`), else the default seq scaled."""
        if self.seq_len is None:
            return min(maximum, scaled(default, self.scale, multiple=8, minimum=8))
        check(
            self.seq_len <= maximum,
            f"`1 <= seq_len <= {maximum}` must hold for {self.name} at scale={self.scale} "
            f"(its position table), but got seq_len={self.seq_len}",
        )
        return self.seq_len

    def pick_cache(self, default: int, maximum: int) -> int:
        """The `cache_len` override (checked against `maximum`), else `default` (capped)."""
        if self.cache_len is None:
            return min(default, maximum)
        check(
            self.cache_len <= maximum,
            f"`1 <= cache_len <= {maximum}` must hold for {self.name} at scale={self.scale} "
            f"(its {maximum + 1} positions hold the cache and the new token), but got "
            f"cache_len={self.cache_len}",
        )
        return self.cache_len


@dataclass(frozen=True)
class ModelSpec:
    """Registry entry: what a zoo model is and how to build it."""

    name: str
    family: str
    description: str
    default_batch: int
    default_layers: int
    min_layers: int
    has_seq: bool
    build: Callable[[BuildArgs], onnx.ModelProto]
    has_cache: bool = False  # a decode step: takes cache_len and cache_form, not seq_len


def scaled(value: int, scale: float, *, multiple: int = 1, minimum: int = 1) -> int:
    """`value * scale` rounded to a multiple of `multiple`, at least `minimum`."""
    return max(minimum, round(value * scale / multiple) * multiple)


def scaled_heads(hidden: int, heads: int, scale: float) -> tuple[int, int]:
    """Scaled (heads, head_dim) of an attention layer; head_dim stays a multiple of 8."""
    n = max(1, round(heads * scale))
    return n, scaled(hidden, scale / n, multiple=8, minimum=8)


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels like torchvision's `_make_divisible` (never down by more than 10%)."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


@dataclass
class _Weight:
    name: str
    shape: tuple[int, ...]
    init: Init
    std: float


class Builder:
    """Accumulates the nodes, weights and constants of one ONNX graph.

    Weights are recorded as specs and materialised only in `model()`: as seeded random
    initializers (`weights="random"`) or as shape-only graph inputs (`weights="inputs"`).
    Names follow torch exports: node `/encoder/layer.3/attention/MatMul`, output
    `<node>_output_0`, weight `encoder.layer.3.attention.query.weight`.
    """

    def __init__(self, args: BuildArgs) -> None:
        self.args = args
        self._scope: list[str] = []
        self._nodes: list[onnx.NodeProto] = []
        self._consts: list[TensorProto] = []
        self._const_names: dict[tuple[Any, ...], str] = {}
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._weights: list[_Weight] = []
        self._names: set[str] = set()
        self._node_count: dict[str, int] = {}
        self.params = 0
        self.input_ranges: dict[str, list[int]] = {}

    # -- naming ---------------------------------------------------------------------------
    @contextmanager
    def scope(self, *parts: str | int) -> Iterator[None]:
        """Prefix the names of weights and nodes made inside the block."""
        self._scope.extend(str(p) for p in parts)
        try:
            yield
        finally:
            del self._scope[-len(parts) :]

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise AssertionError(f"tensor name {name!r} used twice")
        self._names.add(name)
        return name

    # -- graph inputs, outputs, weights, constants ----------------------------------------
    def input(
        self,
        name: str,
        shape: Sequence[int],
        dtype: int = TensorProto.FLOAT,
        value_range: tuple[int, int] | None = None,
    ) -> str:
        """Declare a data input; `value_range` (inclusive) is recorded for integer inputs."""
        self._inputs.append(helper.make_tensor_value_info(self._claim(name), dtype, list(shape)))
        if value_range is not None:
            self.input_ranges[name] = [int(value_range[0]), int(value_range[1])]
        return name

    def output(
        self, tensor: str, name: str, shape: Sequence[int], dtype: int = TensorProto.FLOAT
    ) -> str:
        """Make `tensor` a graph output called `name` with its static shape; return `name`."""
        if tensor != name:
            self._claim(name)
            for node in self._nodes:
                for seq in (node.input, node.output):
                    for i, t in enumerate(seq):
                        if t == tensor:
                            seq[i] = name
            self._names.discard(tensor)
        self._outputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        return name

    def weight(
        self,
        leaf: str,
        shape: Sequence[int],
        *,
        init: Init = "normal",
        std: float = 0.02,
        trainable: bool = True,
    ) -> str:
        """A learned tensor named `<scope>.<leaf>`; `trainable=False` keeps it out of `params`.

        Args:
            init: "normal" draws N(0, std); "one" draws 1 + N(0, std) (norm scales);
                "var" draws U(0.5, 1.5) (BatchNorm running variance, always positive).
        """
        name = self._claim(".".join([*self._scope, leaf]))
        shape_t = tuple(int(d) for d in shape)
        self._weights.append(_Weight(name, shape_t, init, std))
        if trainable:
            self.params += math.prod(shape_t)
        return name

    def const(self, value: np.ndarray | float | int | Sequence[int], hint: str = "const") -> str:
        """A structural constant initializer (kept in both weight modes), deduplicated.

        Python floats become float32 scalars and ints or int lists become int64.
        """
        if isinstance(value, np.ndarray):
            arr = value
        elif isinstance(value, float):
            arr = np.array(value, dtype=np.float32)
        else:
            arr = np.array(value, dtype=np.int64)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._const_names:
            if hint == "const" and arr.size == 1:
                hint = f"const.{arr.item():g}"
            name = hint
            n = 0
            while name in self._names:
                n += 1
                name = f"{hint}_{n}"
            self._consts.append(numpy_helper.from_array(arr, self._claim(name)))
            self._const_names[key] = name
        return self._const_names[key]

    # -- nodes ----------------------------------------------------------------------------
    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        tag: str | None = None,
        out: str | None = None,
        **attrs: Any,
    ) -> str:
        """Append one single-output node and return its output name."""
        outs = None if out is None else [out]
        return self.ops(op_type, inputs, 1, tag=tag, outs=outs, **attrs)[0]

    def ops(
        self,
        op_type: str,
        inputs: Sequence[str],
        n_out: int,
        *,
        tag: str | None = None,
        outs: Sequence[str] | None = None,
        **attrs: Any,
    ) -> list[str]:
        """Append one node with `n_out` outputs and return their names."""
        base = "/" + "/".join([*self._scope, tag or op_type])
        k = self._node_count.get(base, 0)
        self._node_count[base] = k + 1
        node_name = base if k == 0 else f"{base}_{k}"
        names = (
            list(outs) if outs is not None else [f"{node_name}_output_{i}" for i in range(n_out)]
        )
        for n in names:
            self._claim(n)
        self._nodes.append(helper.make_node(op_type, list(inputs), names, name=node_name, **attrs))
        return names

    # -- finishing ------------------------------------------------------------------------
    def weight_bytes(self) -> int:
        """Bytes of float32 weight data the model holds in `weights="random"` mode."""
        return 4 * sum(math.prod(w.shape) for w in self._weights)

    def _fill_random(self, dest: Any) -> None:
        """Append the seeded random weights to `dest` (a graph's initializer list) in place.

        Tensors are written straight into the final proto: copying a few hundred MB through
        make_graph/make_model would cost seconds.
        """
        need = self.weight_bytes()
        check(
            need <= MAX_EMBEDDED_BYTES,
            f"weights='random' must fit one 2 GiB protobuf, but {self.args.name} needs "
            f"{need / 2**30:.1f} GiB of float32 weights; use weights='inputs' or a smaller "
            "scale/layers",
        )
        rng = np.random.default_rng(self.args.seed)
        for w in self._weights:
            if w.init == "var":
                arr = rng.uniform(0.5, 1.5, size=w.shape).astype(np.float32)
            else:
                arr = rng.standard_normal(size=w.shape, dtype=np.float32)
                arr *= np.float32(w.std)
                if w.init == "one":
                    arr += np.float32(1.0)
            t = dest.add()
            t.name = w.name
            t.data_type = TensorProto.FLOAT
            t.dims.extend(w.shape)
            t.raw_data = np.asarray(arr, dtype="<f4").tobytes()

    def model(self, *, family: str, doc: str, extra: dict[str, Any]) -> onnx.ModelProto:
        """Assemble the ModelProto (opset 17, IR 8) with the zoo metadata.

        Raises:
            ZooError: random weights would not fit one protobuf message (2 GiB).
        """
        weight_inputs = []
        if self.args.weights == "inputs":
            weight_inputs = [
                helper.make_tensor_value_info(w.name, TensorProto.FLOAT, list(w.shape))
                for w in self._weights
            ]
        graph = helper.make_graph(
            self._nodes,
            self.args.name,
            self._inputs + weight_inputs,
            self._outputs,
            initializer=self._consts,
            doc_string=doc,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="search_space.zoo",
            doc_string=doc,
        )
        if self.args.weights == "random":
            self._fill_random(model.graph.initializer)
        info = {
            "name": self.args.name,
            "family": family,
            "weights": self.args.weights,
            "scale": self.args.scale,
            "seed": self.args.seed,
            "params": self.params,
            **extra,
        }
        meta = {ZOO_KEY: json.dumps(info), INPUT_RANGES_KEY: json.dumps(self.input_ranges)}
        if self.args.weights == "inputs":
            meta[WEIGHT_INPUTS_KEY] = json.dumps([w.name for w in self._weights])
        helper.set_model_props(model, meta)
        return model
