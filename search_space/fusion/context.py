"""Fusion candidates and legality (docs/fusion.md): which edges may fuse, which groups are legal,
and the deterministic repair that turns any set of chosen edges into a legal partition.

An edge of the kernel graph (:mod:`~search_space.fusion.kernel_graph`) is fusible when both
ends may share a kernel: a cube op and its per-element epilogue or prologue, two vector ops, or
two sibling matmuls reading the same activation (horizontal fusion). Legality lives in
:mod:`~search_space.fusion.legality`, the repair in :mod:`~search_space.fusion.repair`;
:class:`FusionContext` is the one object callers hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cached_property
from itertools import combinations

from search_space.fusion import legality
from search_space.fusion import repair as _repair
from search_space.fusion.incremental import Repairer
from search_space.fusion.kernel_graph import Edge, KernelGraph, Verdict, is_cube, is_vectorish
from search_space.ir import FusionGroup, OpClass, alias_root

__all__ = ["Edge", "FusionContext", "Verdict"]


class FusionContext(KernelGraph):
    """The kernel graph of one model under one policy's hard limits, with its fusible edges.

    Args:
        graph: the model.
        no_fusion_ops: op types (or op names) that never fuse.
        max_fused_ops: the largest group, counted in ops that do work.
    """

    @cached_property
    def edges(self) -> tuple[Edge, ...]:
        """Every fusible edge, in a deterministic order (by consumer, then producer)."""
        g = self.graph
        out: list[Edge] = []
        for dst in self.nodes:
            d = g.op(dst)
            if not self.fusible(d):
                continue
            for src, tensor in self.pred[dst].items():
                s = g.op(src)
                if not self.fusible(s) or (s.op_type == "Gather" and is_cube(d)):
                    continue
                if is_cube(s) and s.unit == "cube":
                    if is_vectorish(d) and not is_cube(d):
                        out.append(Edge(src, dst, "epilogue", tensor))
                elif is_cube(d) and d.unit == "cube":
                    if s.op_class in (OpClass.ELEMENTWISE, OpClass.REDUCE, OpClass.LAYOUT):
                        out.append(Edge(src, dst, "prologue", tensor))
                elif is_vectorish(s) and is_vectorish(d):
                    out.append(Edge(src, dst, "vector", tensor))
        out += self._horizontal()
        return tuple(sorted(out, key=lambda e: (self.index[e.dst], self.index[e.src], e.kind)))

    def _horizontal(self) -> list[Edge]:
        """Sibling matmuls that read the same activation with compile-time weights."""
        g = self.graph
        readers: dict[str, list[str]] = {}
        for name in self.nodes:
            op = g.op(name)
            if (
                op.op_type in ("MatMul", "Gemm")
                and op.unit == "cube"
                and self.fusible(op)
                and self.compile_time(op.inputs[1])
            ):
                readers.setdefault(alias_root(g, op.inputs[0]), []).append(name)
        edges = []
        for tensor, names in readers.items():
            names = sorted(names, key=self.index.__getitem__)
            edges += [Edge(a, b, "horizontal", tensor) for a, b in combinations(names, 2)]
        return edges

    def group(self, ops: Iterable[str]) -> FusionGroup:
        """The FusionGroup a set of kernel ops runs as (views between members included)."""
        return self.to_groups([frozenset(ops)])[0]

    def check(self, ops: Iterable[str]) -> Verdict:
        """Structural legality of a set of kernel ops (feasibility is the caller's callback)."""
        return legality.check(self, ops)

    def is_connected(self, members: frozenset[str]) -> bool:
        return legality.is_connected(self, members)

    def is_convex(self, members: frozenset[str]) -> bool:
        return legality.is_convex(self, members)

    def repair(
        self,
        chosen: Iterable[Edge],
        feasible: Callable[[frozenset[str]], bool] | None = None,
    ) -> list[frozenset[str]]:
        """Union the chosen edges into a legal partition (:func:`~search_space.fusion.repair.
        repair`), taking them in :attr:`edges` order. ``feasible`` must be a pure function of
        a group's ops: with the same one, a repair resumes from the prefix of chosen edges an
        earlier one took (:class:`~search_space.fusion.incremental.Repairer`)."""
        chosen = list(chosen)
        repairer = self._repairers.get(feasible)
        if repairer is None:
            if len(self._repairers) >= 4:  # callbacks made afresh each call: keep a few
                self._repairers.clear()
            repairer = self._repairers[feasible] = Repairer(self, self.edges, feasible)
        if not repairer.covers(chosen):  # an edge that is not fusible: the plain repair
            return _repair.repair(self, self.edges, chosen, feasible)
        return repairer.repair(chosen)

    @cached_property
    def _repairers(self) -> dict[Callable[[frozenset[str]], bool] | None, Repairer]:
        return {}

    def to_groups(self, partition: Iterable[frozenset[str]]) -> list[FusionGroup]:
        """FusionGroups (views between members included) in kernel-graph order."""
        return _repair.to_groups(self, partition)
