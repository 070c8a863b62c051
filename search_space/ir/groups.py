"""Fusion groups: an ordered set of ops that runs as one kernel (docs/architecture.md).

Legality (convexity, anchors, reduce axes) is the search space's job; this module only builds
the record, derives its external inputs/outputs and kind, and its structural signature.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from search_space.exceptions import GraphError, check
from search_space.ir.graph import Graph, Op
from search_space.ir.ops import OpClass

__all__ = ["GROUP_KINDS", "FusionGroup", "alias_root", "make_group", "singleton_groups"]

GROUP_KINDS = (
    "single",
    "cube_epilogue",
    "vector_chain",
    "row_reduce",
    "attention",
    "horizontal_cube",
)


@dataclass(frozen=True)
class FusionGroup:
    """An ordered set of ops run as one kernel.

    Attributes:
        ops: op names in the graph's topological order (views inside the group included).
        kind: one of :data:`GROUP_KINDS`.
        inputs: tensors read from outside the group (activations, weights, constants).
        outputs: tensors the group must write: read outside it, or graph outputs.
    """

    ops: tuple[str, ...]
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def signature(self, graph: Graph) -> str:
        """Structural hash of the group: op types, attributes, shapes and internal wiring."""
        local: dict[str, str] = {}
        for i, t in enumerate(self.inputs):
            ten = graph.tensors[t]
            const = graph.constants.get(t)
            tag = repr(const.tolist()) if const is not None and const.size <= 16 else ten.kind
            local[t] = f"in{i}:{tag}:{ten.shape}:{ten.dtype}"
        parts = [self.kind]
        for k, name in enumerate(self.ops):
            op = graph.op(name)
            srcs = [local.get(t, "-") if t else "" for t in op.inputs]
            for j, t in enumerate(op.outputs):
                if t:
                    local[t] = f"o{k}.{j}:{graph.tensors[t].shape}"
            parts.append(f"{op.op_type}{op.attributes}{srcs}")
        parts.append(repr([local.get(t) for t in self.outputs]))
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


def alias_root(graph: Graph, tensor: str) -> str:
    """The tensor a chain of views (Reshape, Squeeze, ...) reads its bytes from."""
    seen = 0
    while True:
        op = graph.producer(tensor)
        if op is None or not op.is_view or not op.inputs or seen > len(graph.ops):
            return tensor
        tensor, seen = op.inputs[0], seen + 1


def _infer_kind(ops: list[Op]) -> str:
    work = [op for op in ops if not op.is_view]
    if len(work) <= 1:
        return "single"
    cube = [op for op in work if op.op_class is OpClass.CUBE and op.unit == "cube"]
    if len(cube) >= 2:
        has_softmax = any(op.op_type in ("Softmax", "LogSoftmax") for op in work)
        return "attention" if has_softmax else "horizontal_cube"
    if len(cube) == 1 or any(op.op_class is OpClass.CUBE for op in work):
        return "cube_epilogue"
    if any(op.op_class is OpClass.REDUCE for op in work):
        return "row_reduce"
    return "vector_chain"


def make_group(graph: Graph, names: Iterable[str], kind: str | None = None) -> FusionGroup:
    """Build a group from op names (any order); derive its inputs, outputs and kind.

    Raises:
        GraphError: an unknown op name, an empty group, or an unknown kind.
    """
    wanted = set(names)
    check(wanted, "a fusion group needs at least one op")
    missing = sorted(n for n in wanted if not graph.has_op(n))
    check(not missing, f"no op named {missing[0]!r} in graph '{graph.name}'" if missing else "")
    ops = [op for op in graph.ops if op.name in wanted]
    produced = {t for op in ops for t in op.outputs if t}
    inputs = tuple(dict.fromkeys(t for op in ops for t in op.inputs if t and t not in produced))
    graph_outputs = set(graph.outputs)
    outputs = tuple(
        t
        for op in ops
        for t in op.outputs
        if t and (t in graph_outputs or any(c.name not in wanted for c in graph.consumers(t)))
    )
    kind = kind or _infer_kind(ops)
    if kind not in GROUP_KINDS:
        raise GraphError(f"unknown group kind '{kind}'; available: {', '.join(GROUP_KINDS)}")
    return FusionGroup(tuple(op.name for op in ops), kind, inputs, outputs)


def singleton_groups(graph: Graph) -> list[FusionGroup]:
    """The ``none`` plan: every op that does work is its own kernel.

    Views are free metadata, and ops computed from constants only (a causal mask built from
    shapes) are prepared offline like weights, so neither becomes a kernel.
    """
    return [
        make_group(graph, [op.name], "single")
        for op in graph.ops
        if not op.is_view and not op.constant
    ]
