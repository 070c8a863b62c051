"""The kernel graph of one model: one node per op that does work, edges by data flow.

Views are transparent metadata and ops computed from constants only are prepared offline, so
neither is a node; an edge runs from an op to each op that reads its output (through views).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from search_space.ir import FusionGroup, Graph, Op, OpClass, alias_root

__all__ = ["Edge", "KernelGraph", "Verdict", "is_cube", "is_vectorish"]


@dataclass(frozen=True, order=True)
class Edge:
    """A fusible pair: ``src`` feeds ``dst`` (or, for ``horizontal``, both read ``tensor``)."""

    src: str
    dst: str
    kind: str  # "epilogue" | "prologue" | "vector" | "horizontal"
    tensor: str


@dataclass(frozen=True)
class Verdict:
    """Whether a set of ops may be one kernel, and if not, why."""

    ok: bool
    reason: str = ""


def is_cube(op: Op) -> bool:
    return op.op_class is OpClass.CUBE


def is_vectorish(op: Op) -> bool:
    """Work for the vector unit: elementwise, reduce and layout ops, and vector-unit convs."""
    return op.op_class in (OpClass.ELEMENTWISE, OpClass.REDUCE, OpClass.LAYOUT) or (
        is_cube(op) and op.unit == "vector"
    )


class KernelGraph:
    """The kernel graph of one model under one policy's hard limits.

    Args:
        graph: the model.
        no_fusion_ops: op types (or op names) that never fuse.
        max_fused_ops: the largest group, counted in ops that do work.
    """

    def __init__(
        self, graph: Graph, no_fusion_ops: Iterable[str] = (), max_fused_ops: int = 16
    ) -> None:
        self.graph = graph
        self.no_fusion = frozenset(no_fusion_ops)
        self.max_fused_ops = max_fused_ops
        self.nodes: tuple[str, ...] = tuple(
            op.name for op in graph.ops if not op.is_view and not op.constant
        )
        self.index = {n: i for i, n in enumerate(self.nodes)}
        succ: dict[str, dict[str, str]] = {n: {} for n in self.nodes}
        pred: dict[str, dict[str, str]] = {n: {} for n in self.nodes}
        for name in self.nodes:
            op = graph.op(name)
            for t in op.inputs:
                if not t:
                    continue
                root = alias_root(graph, t)
                src = graph.producer(root)
                if src is not None and src.name in self.index:
                    succ[src.name].setdefault(name, root)
                    pred[name].setdefault(src.name, root)
        self.succ = succ
        self.pred = pred
        self.legal_memo: dict[frozenset[str], bool] = {}  # legality.legal's answers
        self.group_memo: dict[frozenset[str], FusionGroup] = {}  # repair.to_groups' groups

    def fusible(self, op: Op) -> bool:
        """May the op share a kernel at all (not opaque, not forbidden by the policy)?"""
        return (
            op.op_class is not OpClass.OPAQUE
            and op.op_type not in self.no_fusion
            and op.name not in self.no_fusion
        )

    def compile_time(self, tensor: str) -> bool:
        """Is the tensor (through views) a weight, a constant or computed from them?"""
        g = self.graph
        root = alias_root(g, tensor)
        op = g.producer(root)
        return g.tensors[root].kind in ("weight", "constant") or (op is not None and op.constant)

    def components(self, members: frozenset[str]) -> list[set[str]]:
        """The members' connected components along data-flow edges, in kernel-graph order."""
        comps: list[set[str]] = []
        placed: set[str] = set()
        for n in sorted(members, key=self.index.__getitem__):
            if n in placed:
                continue
            seen, todo = {n}, [n]
            while todo:
                x = todo.pop()
                for m in (*self.succ[x], *self.pred[x]):
                    if m in members and m not in seen:
                        seen.add(m)
                        todo.append(m)
            placed |= seen
            comps.append(seen)
        return comps

    def descendants(self, start: str, members: frozenset[str]) -> set[str]:
        """Members reachable from ``start`` through members."""
        return self._reach(start, members, self.succ)

    def ancestors(self, start: str, members: frozenset[str]) -> set[str]:
        """Members that reach ``start`` through members."""
        return self._reach(start, members, self.pred)

    @staticmethod
    def _reach(start: str, members: frozenset[str], step: dict[str, dict[str, str]]) -> set[str]:
        out, todo = set(), [start]
        while todo:
            n = todo.pop()
            for m in step[n]:
                if m in members and m not in out:
                    out.add(m)
                    todo.append(m)
        return out
