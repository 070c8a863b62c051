"""The builder behind the fuzzing strategy (:mod:`fuzz_graphs`): values with the interval
that holds them, and the nodes, initializers and pool of values of a model being drawn."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper, numpy_helper

MAX_NODES = 8
MAX_NUMEL = 8192  # elements of the largest value
INPUT_SPAN = 5.0  # |x| of the inputs the intervals hold for
NP_TYPE: dict[int, type[np.floating[Any]]] = {T.FLOAT: np.float32, T.FLOAT16: np.float16}
LIMIT: dict[int, float] = {T.FLOAT: 1e4, T.FLOAT16: 1e3}  # largest |value|, far from overflow

Draw = Callable[[st.SearchStrategy[Any]], Any]
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Value:
    """A tensor of the model being built: its name, static shape, element type, and an
    interval ``[lo, hi]`` holding every entry."""

    name: str
    shape: Shape
    elem: int
    lo: float
    hi: float

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def span(self) -> float:
        return max(abs(self.lo), abs(self.hi))


class Builder:
    """Nodes, initializers and the pool of values a model is drawn from."""

    def __init__(self, opset: int, rng: np.random.Generator) -> None:
        self.opset, self.rng = opset, rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[Value] = []
        self.pool: list[Value] = []  # graph inputs, then node outputs, in order
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def fits(self, elem: int, lo: float, hi: float) -> bool:
        """Whether an interval is finite and small enough for ``elem``."""
        return math.isfinite(lo) and math.isfinite(hi) and max(-lo, hi) <= LIMIT[elem]

    def input(self, shape: Shape, elem: int) -> Value:
        v = Value(self._name("in"), shape, elem, -INPUT_SPAN, INPUT_SPAN)
        self.inputs.append(v)
        self.pool.append(v)
        return v

    def const(self, values: npt.ArrayLike, elem: int | None = None) -> str:
        """An initializer (float ones in ``elem``), returning its name."""
        arr = np.asarray(values)
        if elem is not None:
            arr = arr.astype(NP_TYPE[elem])
        name = self._name("w")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64))

    def scalar_int(self, value: int) -> str:
        return self.const(np.asarray(value, dtype=np.int64))

    def listed(
        self, key: str, values: Sequence[int], since: int
    ) -> tuple[list[str], dict[str, Any]]:
        """A list argument as the op's opset takes it: an input from opset ``since``, an
        attribute before (Squeeze axes, Split sizes, Reduce* axes)."""
        if self.opset >= since:
            return [self.ints(values)], {}
        return [], {key: list(values)}

    def uniform(self, shape: Shape, lo: float, hi: float, elem: int) -> str:
        """A float initializer drawn from U[lo, hi], returning its name."""
        return self.const(self.rng.uniform(lo, hi, size=shape), elem)

    def node(
        self,
        op: str,
        inputs: Sequence[str],
        outs: Sequence[tuple[Shape, int, float, float]],
        hidden: bool = False,
        **attrs: Any,
    ) -> list[Value]:
        """Add a node; ``outs`` gives each output's shape, type and interval. Its outputs join
        the pool unless ``hidden`` (a mask no other op may read)."""
        values = [Value(self._name("t"), *o) for o in outs]
        name = self._name(f"{op.lower()}_")
        self.nodes.append(
            helper.make_node(op, list(inputs), [v.name for v in values], name=name, **attrs)
        )
        if not hidden:
            self.pool.extend(values)
        return values

    def one(
        self,
        op: str,
        inputs: Sequence[str],
        shape: Shape,
        elem: int,
        lo: float,
        hi: float,
        hidden: bool = False,
        **attrs: Any,
    ) -> Value:
        """Add a node of one output."""
        return self.node(op, inputs, [(shape, elem, lo, hi)], hidden, **attrs)[0]

    def positive(self, v: Value) -> Value:
        """``v`` itself when it is >= 0.5 throughout, else ``v + c`` that is."""
        if v.lo >= 0.5:
            return v
        c = 0.5 - v.lo
        shift = self.const(np.float32(c), v.elem)
        return self.one("Add", [v.name, shift], v.shape, v.elem, 0.5, v.hi + c)

    def model(self, draw: Draw) -> onnx.ModelProto:
        """The model: unread inputs dropped; node outputs nobody reads are graph outputs, and
        sometimes one that is also read (fan-out to the outside). Sometimes as older
        exporters write it: constants as Constant nodes, initializers also listed as graph
        inputs, nodes without names."""
        read = {t for n in self.nodes for t in n.input}
        made = self.pool[len(self.inputs) :]
        outs = [v for v in made if v.name not in read]
        inner = [v for v in made if v.name in read]
        if inner and draw(st.booleans()):
            outs.append(draw(st.sampled_from(inner)))
            outs.sort(key=made.index)

        def info(v: Value) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(v.name, v.elem, list(v.shape))

        ins = [info(v) for v in self.inputs if v.name in read]
        nodes, inits = list(self.nodes), list(self.inits)
        if draw(st.booleans()):
            nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in inits] + nodes
            inits = []
        if draw(st.booleans()):
            ins += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in inits]
        if draw(st.booleans()):
            for n in nodes:
                n.name = ""
        graph = helper.make_graph(nodes, "fuzz", ins, [info(v) for v in outs], inits)
        imports = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=imports)
        model.ir_version = helper.find_min_ir_version_for(imports)
        return model


def corners(
    fn: Callable[[float, float], float], a: tuple[float, float], c: tuple[float, float]
) -> tuple[float, float]:
    """The interval of ``fn`` over two intervals, from its values at the corners."""
    vals = [fn(x, y) for x in a for y in c]
    return min(vals), max(vals)


def broadcast(a: Shape, c: Shape) -> Shape | None:
    """The shape two shapes broadcast to, or None when they do not."""
    try:
        return tuple(np.broadcast_shapes(a, c))
    except ValueError:
        return None
