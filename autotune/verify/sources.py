"""Where a subgraph's values come from: the model's weights and constants, and fresh draws.

Compile-time tensors come from the model's initializers, the graph's folded constants, or its
constant nodes evaluated again. Activations are drawn from the ranges the graph implies: token
ids below the embedding table's rows (or the model's recorded input ranges), masks 0/1 (mostly
ones, never a fully masked row), N(0, 1) floats. Weights given as graph inputs
(``weights="inputs"``) are drawn for their use: N(0, 1/sqrt(fan_in)) for matmul and conv
weights, norm scales near one, BatchNorm running variances positive. A float input computed
from an integer graph input by a few elementwise ops (an additive attention mask) is computed
again from a fresh draw of that input.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import onnx
from onnx import external_data_helper, inliner, numpy_helper

from autotune.verify.numerics import stable_rng
from autotune.verify.slices import slice_values
from search_space.ir import Graph, Op, OpClass, alias_root, is_compile_time
from search_space.onnx import attributes_of, evaluate, node_names
from search_space.zoo import INPUT_RANGES_KEY

__all__ = ["ModelSource", "np_dtype"]

VIEW_TYPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


class ModelSource:
    """The original model seen through its graph: nodes by name, compile-time values, and
    seeded draws (every draw depends on ``seed`` and the tensor's name only)."""

    def __init__(self, model: onnx.ModelProto, graph: Graph, *, seed: int = 0) -> None:
        if model.functions:
            model = inliner.inline_local_functions(model)
        self.model, self.graph, self.seed = model, graph, seed
        self.nodes = dict(zip(node_names(model.graph.node), model.graph.node, strict=True))
        self.producer = {t: n for n in model.graph.node for t in n.output if t}
        self.inits = {t.name: t for t in model.graph.initializer}
        meta = {p.key: p.value for p in model.metadata_props}
        self.ranges: dict[str, list[int]] = json.loads(meta.get(INPUT_RANGES_KEY, "{}"))
        self.imports = tuple(model.opset_import)
        self._values: dict[str, np.ndarray] = {}

    # -- compile-time tensors ------------------------------------------------------------------
    def value(self, name: str) -> np.ndarray:
        """A weight or constant: initializer, folded constant, constant subgraph, or a draw."""
        if name in self._values:
            return self._values[name]
        g = self.graph
        if name in g.constants:
            v = np.asarray(g.constants[name])
        elif self._held(name):
            v = numpy_helper.to_array(self.inits[name])
        elif name in self.producer and name not in self.inits:
            node = self.producer[name]
            if node.op_type == "Constant":
                v = np.asarray(next(iter(attributes_of(node).values())))
            else:
                ins = [self.value(t) if t else None for t in node.input]
                outs = evaluate(node, ins, self.imports, g.opset)
                if outs is None:  # an op the folding evaluator does not know
                    return self._values.setdefault(name, slice_values(self.model, g, [name])[name])
                for t, o in zip(node.output, outs, strict=False):
                    self._values[t] = o
                return self._values[name]
        else:  # a weight given as a graph input, or external data we do not read here
            v = self.weight(name)
        self._values[name] = v
        return v

    def rows(self, name: str, used: np.ndarray) -> np.ndarray:
        """Rows ``used`` of a table, without drawing the rest of a weight the model lacks."""
        if name in self._values or name in self.graph.constants or self._held(name):
            return self.value(name)[used]
        full = self.graph.tensors[name].static_shape
        return self.weight(name, (len(used), *full[1:]))

    def _held(self, name: str) -> bool:
        init = self.inits.get(name)
        return init is not None and not external_data_helper.uses_external_data(init)

    def weight(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A random weight shaped for its use: N(0, 1/sqrt(fan_in)), norm scales near 1."""
        ten = self.graph.tensors[name]
        shape = shape or ten.static_shape
        rng = stable_rng(self.seed, "w:" + name)
        users = self.graph.consumers(name)
        while users and users[0].op_type in VIEW_TYPES | {"Transpose"}:
            users = self.graph.consumers(users[0].outputs[0])
        op = users[0] if users else None
        pos = op.inputs.index(name) if op is not None and name in op.inputs else 1
        kind = op.op_type if op is not None else ""
        normal = rng.standard_normal(shape, dtype=np.float32)
        if kind == "BatchNormalization":
            v = rng.uniform(0.5, 1.5, shape) if pos == 4 else (pos == 1) + 0.1 * normal
        elif kind == "LayerNormalization" or (kind == "Mul" and len(shape) <= 1):
            v = (pos == 1 or kind == "Mul") + 0.1 * normal
        elif kind == "Gather" or len(shape) == 0:
            v = normal
        elif kind in ("Add", "Sub") or len(shape) == 1 or (kind in ("Gemm", "Conv") and pos == 2):
            v = 0.1 * normal
        else:
            if kind == "Conv":
                fan = math.prod(shape[1:])
            elif kind == "Gemm":
                fan = shape[1] if op is not None and op.attr("transB", 0) else shape[0]
            else:
                fan = shape[-2] if pos == 1 else shape[-1]
            v = normal / math.sqrt(max(1, fan))
        return np.asarray(v, dtype=np_dtype(ten.dtype))

    # -- activations --------------------------------------------------------------------------
    def _gather_rows(self, name: str) -> int | None:
        seen, todo = set(), [name]
        while todo:
            t = todo.pop()
            seen.add(t)
            for op in self.graph.consumers(t):
                if op.op_type == "Gather" and len(op.inputs) > 1 and op.inputs[1] == t:
                    table = self.graph.tensors[op.inputs[0]].static_shape
                    return table[op.attr("axis", 0) % len(table)]
                if op.op_type in VIEW_TYPES and op.outputs[0] not in seen:
                    todo.append(op.outputs[0])
        return None

    def draw(self, name: str, shape: tuple[int, ...], scale: float) -> np.ndarray:
        """A fresh activation: N(0, scale^2) floats, token ids, or 0/1 masks."""
        ten = self.graph.tensors[name]
        rng = stable_rng(self.seed, "x:" + name)
        dtype = np_dtype(ten.dtype)
        if dtype.kind == "f":
            return (rng.standard_normal(shape) * scale).astype(dtype)
        lo, hi = self.ranges.get(alias_root(self.graph, name), [0, 1])
        rows = self._gather_rows(name)
        if rows is not None:
            hi = min(hi, rows - 1) if [lo, hi] != [0, 1] else rows - 1
            return rng.integers(max(0, lo), hi + 1, size=shape).astype(dtype)
        if [lo, hi] != [0, 1]:
            return rng.integers(lo, hi + 1, size=shape).astype(dtype)
        mask = rng.random(shape) < 0.8
        if mask.ndim:
            mask[..., 0] = True
        return mask.astype(dtype)

    def derived(self, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """Recompute a float input made from an integer graph input by a few elementwise ops."""
        g, todo = self.graph, [name]
        cone: list[Op] = []
        leaves: set[str] = set()
        while todo:
            t = todo.pop()
            if is_compile_time(g, t) or t in leaves:
                continue
            op = g.producer(t)
            if op is None:
                if g.tensors[t].kind != "input" or g.tensors[t].dtype.startswith("float"):
                    return None
                leaves.add(t)
                continue
            elementwise = op.op_class is OpClass.ELEMENTWISE or op.op_type in VIEW_TYPES
            if not elementwise or len(cone) >= 8:
                return None
            if op not in cone:
                cone.append(op)
                todo.extend(x for x in op.inputs if x)
        if not leaves or not g.tensors[name].dtype.startswith("float"):
            return None
        full = g.tensors[name].static_shape
        if shape != full and (len(shape) != len(full) or shape[1:] != full[1:]):
            return None
        env: dict[str, Any] = {}
        for t in leaves:
            leaf = g.tensors[t].static_shape
            if shape != full and (not leaf or leaf[0] != full[0]):
                return None
            env[t] = self.draw(t, (shape[0], *leaf[1:]) if shape != full else leaf, 1.0)
        for op in sorted(cone, key=lambda o: g.ops.index(o)):
            ins = [(env[t] if t in env else self.value(t)) if t else None for t in op.inputs]
            outs = evaluate(self.nodes[op.name], ins, self.imports, g.opset)
            if outs is None:
                return None
            env.update(zip(op.outputs, outs, strict=False))
        out = np.asarray(env[name])
        return out if out.shape == shape else None


def np_dtype(name: str) -> np.dtype[Any]:
    if name == "bfloat16":
        return np.dtype(np.float32)
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(np.float32)
