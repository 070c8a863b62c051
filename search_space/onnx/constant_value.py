"""The value of a compile-time tensor of a loaded graph, evaluated on demand.

The loader folds small constants (:data:`~search_space.onnx.fold.FOLD_LIMIT`) and leaves the
larger outputs of constant-only ops as ops (``Op.constant``): a causal mask, a rotary table.
A cost model or a code generator that needs such a value (whether a mask is causal) evaluates
the op's subgraph here, from the folded constants, one node at a time, up to a budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from search_space.ir import Graph
from search_space.onnx.fold import evaluate
from search_space.onnx.io import load_tensor_data

__all__ = ["VALUE_LIMIT", "InitializerValues", "constant_value", "maskable"]

# largest tensor (elements) evaluated here: an 8192 x 8192 mask
VALUE_LIMIT = 1 << 26


def constant_value(graph: Graph, tensor: str, limit: int = VALUE_LIMIT) -> np.ndarray | None:
    """The value of ``tensor`` when it is known at compile time: a folded constant, an
    initializer, or the output of constant-only ops, each tensor of at most ``limit``
    elements; None for a runtime tensor, a weight given as an input, or a larger one."""
    return _value(graph, tensor, limit, {})


def _value(
    graph: Graph, tensor: str, limit: int, memo: dict[str, np.ndarray | None]
) -> np.ndarray | None:
    if tensor in graph.constants:
        return np.asarray(graph.constants[tensor])
    if tensor in memo:
        return memo[tensor]
    ten = graph.tensors.get(tensor)
    if tensor in graph.initializers and ten is not None and ten.is_static:
        return graph.initializers[tensor] if math.prod(ten.static_shape) <= limit else None
    memo[tensor] = None  # a cycle or a failure reads as unknown
    op = graph.producer(tensor)
    if op is None or not op.constant or ten is None or not ten.is_static:
        return None
    if math.prod(ten.static_shape) > limit:
        return None
    ins = [_value(graph, t, limit, memo) if t else None for t in op.inputs]
    if any(v is None for t, v in zip(op.inputs, ins, strict=True) if t):
        return None
    attrs = {k: _attribute(v) for k, v in op.attributes}
    if op.op_type == "ConstantOfShape" and isinstance(attrs.get("value"), tuple | list):
        # the IR keeps a tensor attribute's values as a tuple: its type is the output's
        kind = ten.dtype if ten.dtype in np.sctypeDict else "float32"
        attrs["value"] = numpy_helper.from_array(np.array(attrs["value"], dtype=kind))
    node = helper.make_node(op.op_type, list(op.inputs), list(op.outputs), **attrs)
    opsets = [helper.make_opsetid("", graph.opset)]
    outs = evaluate(node, ins, opsets, graph.opset)
    if outs is None:
        return None
    for name, value in zip(op.outputs, outs, strict=False):
        if name:
            memo[name] = value
    return memo[tensor]


def _attribute(value: Any) -> Any:
    """An attribute as ``helper.make_node`` takes it (a tensor attribute as a TensorProto)."""
    return numpy_helper.from_array(value) if isinstance(value, np.ndarray) else value


class InitializerValues(Mapping[str, np.ndarray]):
    """Initializers as numpy arrays, each read (external data included) when first asked for
    and not kept, and ``folded`` values the loader computed from them. A graph holds those
    that may be masks (``maskable``), never a layer's weights."""

    def __init__(
        self,
        tensors: Iterable[onnx.TensorProto],
        base: Path | None,
        folded: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self._tensors = {t.name: t for t in tensors}
        self._base = base
        self._folded = dict(folded or {})

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._folded:
            return self._folded[name]
        return numpy_helper.to_array(load_tensor_data(self._tensors[name], self._base))

    def __contains__(self, name: object) -> bool:  # by name: never decodes a tensor
        return name in self._tensors or name in self._folded

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self._tensors), **dict.fromkeys(self._folded)})

    def __len__(self) -> int:
        return len(set(self._tensors) | set(self._folded))


# ops through which an initializer may still be a mask (an additive mask, a Where's
# condition): the graph keeps the values of such initializers only, never a layer's weights
_MASK_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Where",
        "Cast",
        "Expand",
        "Unsqueeze",
        "Reshape",
        "Slice",
        "Not",
        "And",
        "Or",
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
    }
)


def maskable(g: onnx.GraphProto) -> list[onnx.TensorProto]:
    """The initializers every consumer of which is an op a mask is built or applied with."""
    users: dict[str, set[str]] = {}
    for node in g.node:
        for name in node.input:
            users.setdefault(name, set()).add(node.op_type)
    return [t for t in g.initializer if users.get(t.name) and users[t.name] <= _MASK_OPS]
