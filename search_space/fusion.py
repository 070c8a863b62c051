"""Fusion candidates and legality (DESIGN §4): which edges may fuse, which groups are legal,
and the deterministic repair that turns any set of chosen edges into a legal partition.

The *kernel graph* has one node per op that does work (views are transparent metadata and
ops computed from constants only are prepared offline). An edge is fusible when both ends may
share a kernel: a cube op and its per-element epilogue or prologue, two vector ops, or two
sibling matmuls reading the same activation (horizontal fusion). A group is legal when it is
convex, has at most one cube anchor (or is the attention or horizontal template), keeps
prologues per-element, reduces only along its row axis, holds no forbidden op, stays within
``max_fused_ops``, and some config fits the buffers (the ``feasible`` callback).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations

from search_space.graph import Graph, Op
from search_space.groups import FusionGroup, alias_root, make_group
from search_space.ops import OpClass, reduction_axes

__all__ = ["Edge", "FusionContext", "Verdict"]

REDUCE_ROW = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceSumSquare",
        "ReduceL2",
        "ReduceL1",
        "ReduceProd",
        "ReduceLogSumExp",
        "RMSNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "ArgMax",
        "ArgMin",
        "CumSum",
        "LpNormalization",
    }
)


@dataclass(frozen=True, order=True)
class Edge:
    """A fusible pair: ``src`` feeds ``dst`` (or, for ``horizontal``, both read ``tensor``)."""

    src: str
    dst: str
    kind: str  # "epilogue" | "prologue" | "vector" | "horizontal"
    tensor: str


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


def _is_cube(op: Op) -> bool:
    return op.op_class is OpClass.CUBE


def _is_vectorish(op: Op) -> bool:
    return op.op_class in (OpClass.ELEMENTWISE, OpClass.REDUCE, OpClass.LAYOUT) or (
        _is_cube(op) and op.unit == "vector"
    )


class FusionContext:
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

    # -- candidates ---------------------------------------------------------------------------
    def fusible(self, op: Op) -> bool:
        return (
            op.op_class is not OpClass.OPAQUE
            and op.op_type not in self.no_fusion
            and op.name not in self.no_fusion
        )

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
                if not self.fusible(s) or (s.op_type == "Gather" and _is_cube(d)):
                    continue
                if _is_cube(s) and s.unit == "cube":
                    if _is_vectorish(d) and not _is_cube(d):
                        out.append(Edge(src, dst, "epilogue", tensor))
                elif _is_cube(d) and d.unit == "cube":
                    if s.op_class in (OpClass.ELEMENTWISE, OpClass.REDUCE, OpClass.LAYOUT):
                        out.append(Edge(src, dst, "prologue", tensor))
                elif _is_vectorish(s) and _is_vectorish(d):
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
                and self._compile_time(op.inputs[1])
            ):
                readers.setdefault(alias_root(g, op.inputs[0]), []).append(name)
        edges = []
        for tensor, names in readers.items():
            names = sorted(names, key=self.index.__getitem__)
            edges += [Edge(a, b, "horizontal", tensor) for a, b in combinations(names, 2)]
        return edges

    def _compile_time(self, tensor: str) -> bool:
        g = self.graph
        root = alias_root(g, tensor)
        op = g.producer(root)
        return g.tensors[root].kind in ("weight", "constant") or (op is not None and op.constant)

    def group(self, ops: Iterable[str]) -> FusionGroup:
        """The FusionGroup a set of kernel ops runs as (views between members included)."""
        return self.to_groups([frozenset(ops)])[0]

    # -- legality ----------------------------------------------------------------------------
    def check(self, ops: Iterable[str]) -> Verdict:
        """Structural legality of a set of kernel ops (feasibility is the caller's callback)."""
        members = frozenset(ops)
        g = self.graph
        if len(members) > self.max_fused_ops:
            return Verdict(False, f"more than max_fused_ops={self.max_fused_ops} ops")
        mops = [g.op(n) for n in sorted(members, key=self.index.__getitem__)]
        for op in mops:
            if not self.fusible(op) and len(members) > 1:
                return Verdict(False, f"{op.op_type} '{op.name}' never fuses")
        if len(members) == 1:
            return Verdict(True)
        if not self.is_connected(members):
            return Verdict(False, "ops are not connected")
        if not self.is_convex(members):
            return Verdict(False, "not convex: a path leaves the group and re-enters it")
        cubes = [op for op in mops if _is_cube(op)]
        if len(cubes) > 1:
            return self._multi_anchor(members, mops, cubes)
        if cubes:
            return self._anchored(members, mops, cubes[0])
        return self._rows(mops, None)

    def _components(self, members: frozenset[str]) -> list[set[str]]:
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

    def is_connected(self, members: frozenset[str]) -> bool:
        """Connected by edges, or by sibling matmuls reading one activation (horizontal)."""
        comps = self._components(members)
        if len(comps) == 1:
            return True
        g = self.graph
        heads: set[str] = set()
        for comp in comps:
            roots = {
                alias_root(g, g.op(n).inputs[0])
                for n in comp
                if _is_cube(g.op(n)) and g.op(n).unit == "cube"
            }
            if not roots:
                return False
            heads |= roots
        return len(heads) == 1

    def is_convex(self, members: frozenset[str]) -> bool:
        """No path leaves the set and re-enters it (checked only up to the last member)."""
        last = max(self.index[n] for n in members)
        frontier = deque(m for n in members for m in self.succ[n] if m not in members)
        seen = set(frontier)
        while frontier:
            n = frontier.popleft()
            for m in self.succ[n]:
                if m in members:
                    return False
                if m not in seen and self.index[m] < last:
                    seen.add(m)
                    frontier.append(m)
        return True

    def _descendants(self, start: str, members: frozenset[str]) -> set[str]:
        out, todo = set(), [start]
        while todo:
            n = todo.pop()
            for m in self.succ[n]:
                if m in members and m not in out:
                    out.add(m)
                    todo.append(m)
        return out

    def _ancestors(self, start: str, members: frozenset[str]) -> set[str]:
        out, todo = set(), [start]
        while todo:
            n = todo.pop()
            for m in self.pred[n]:
                if m in members and m not in out:
                    out.add(m)
                    todo.append(m)
        return out

    def _anchored(self, members: frozenset[str], mops: list[Op], anchor: Op) -> Verdict:
        g = self.graph
        after = self._descendants(anchor.name, members)
        before = self._ancestors(anchor.name, members)
        for op in mops:
            if op is anchor:
                continue
            if op.name in before:
                if op.op_class is not OpClass.ELEMENTWISE and not op.is_view:
                    return Verdict(False, f"prologue {op.op_type} is not per-element")
                if op.name in after:
                    return Verdict(False, "op both feeds and follows the anchor")
            elif op.name not in after:
                return Verdict(
                    False,
                    f"{op.op_type} '{op.name}' is neither prologue nor epilogue of the anchor",
                )
        out = g.tensors[anchor.outputs[0]]
        return self._rows([g.op(n) for n in after], out.static_shape[-1] if out.shape else None)

    def _rows(self, mops: Sequence[Op], row: int | None) -> Verdict:
        """Every reduction reduces the same trailing extent: the group's row axis."""
        g = self.graph
        extents = set()
        for op in mops:
            if op.op_type not in REDUCE_ROW or not op.inputs[0]:
                continue
            shape = g.tensors[op.inputs[0]].static_shape
            extent = _trailing_extent(op, shape, g)
            if extent is None:
                return Verdict(False, f"{op.op_type} does not reduce the row (last) axis")
            extents.add(extent)
        if len(extents) > 1:
            return Verdict(False, "reductions over different row lengths")
        if row is not None and extents and extents != {row}:
            return Verdict(False, "epilogue reduction does not run along the output rows")
        return Verdict(True)

    def _multi_anchor(self, members: frozenset[str], mops: list[Op], cubes: list[Op]) -> Verdict:
        g = self.graph
        has_softmax = any(op.op_type in ("Softmax", "LogSoftmax") for op in mops)
        if len(cubes) == 2 and has_softmax:
            qk, pv = cubes
            if qk.name not in self._ancestors(pv.name, members):
                return Verdict(False, "attention: PV does not follow QK^T")
            mid = self._descendants(qk.name, members) & self._ancestors(pv.name, members)
            if not any(g.op(n).op_type in ("Softmax", "LogSoftmax") for n in mid):
                return Verdict(False, "attention: no softmax between QK^T and PV")
            if any(_is_cube(g.op(n)) for n in mid):
                return Verdict(False, "attention: a third matmul inside")
            if self._descendants(pv.name, members):
                return Verdict(False, "attention: ops after PV")
            return self._rows([g.op(n) for n in mid], None)
        roots = {alias_root(g, c.inputs[0]) for c in cubes}
        if len(roots) != 1 or any(op.op_type not in ("MatMul", "Gemm") for op in cubes):
            return Verdict(False, "more than one cube anchor")
        if not all(self._compile_time(c.inputs[1]) for c in cubes):
            return Verdict(False, "horizontal: a matmul's B operand is not a weight")
        for c in cubes:
            if self._descendants(c.name, members) & {x.name for x in cubes}:
                return Verdict(False, "horizontal: one matmul feeds another")
        for op in mops:
            if _is_cube(op):
                continue
            if not any(op.name in self._descendants(c.name, members) for c in cubes):
                return Verdict(False, "horizontal: prologues are not supported")
        return Verdict(True)

    # -- repair ------------------------------------------------------------------------------
    def repair(
        self,
        chosen: Iterable[Edge],
        feasible: Callable[[frozenset[str]], bool] | None = None,
    ) -> list[frozenset[str]]:
        """Union the chosen edges into groups, skipping (splitting at) any edge whose merge
        would be illegal. Deterministic: edges are taken in :attr:`edges` order.

        Returns:
            A partition of the kernel ops into legal, convex groups whose contraction is acyclic.
        """
        group: dict[str, frozenset[str]] = {n: frozenset([n]) for n in self.nodes}
        order = {e: i for i, e in enumerate(self.edges)}
        pending = sorted(set(chosen), key=lambda e: order.get(e, len(order)))
        while pending:  # an edge refused now may become legal once others have merged
            skipped = []
            for edge in pending:
                a, b = group[edge.src], group[edge.dst]
                if a is b:
                    continue
                merged = a | b
                if (
                    self._cycle_through(a, b, group)
                    or not self.check(merged).ok
                    or (feasible is not None and not feasible(merged))
                ):
                    skipped.append(edge)
                    continue
                for n in merged:
                    group[n] = merged
            if len(skipped) == len(pending):
                break
            pending = skipped
        seen: dict[frozenset[str], None] = {}
        for n in self.nodes:
            seen.setdefault(group[n])
        return list(seen)

    def _cycle_through(
        self, a: frozenset[str], b: frozenset[str], group: dict[str, frozenset[str]]
    ) -> bool:
        """Would merging ``a`` and ``b`` close a cycle through other groups?"""
        return self._path_via_others(a, b, group) or self._path_via_others(b, a, group)

    def _path_via_others(
        self, a: frozenset[str], b: frozenset[str], group: dict[str, frozenset[str]]
    ) -> bool:
        limit = max(self.index[n] for n in b)
        start = {group[m] for n in a for m in self.succ[n]} - {a, b}
        todo = [g for g in start if min(self.index[n] for n in g) < limit]
        seen = set(todo)
        while todo:
            cur = todo.pop()
            for n in cur:
                for m in self.succ[n]:
                    if m in b:
                        return True
                    nxt = group[m]
                    if nxt is a or nxt in seen:
                        continue
                    if min(self.index[x] for x in nxt) < limit:
                        seen.add(nxt)
                        todo.append(nxt)
        return False

    def to_groups(self, partition: Iterable[frozenset[str]]) -> list[FusionGroup]:
        """FusionGroups (views between members included) in kernel-graph order."""
        g = self.graph
        out = []
        parts = sorted(partition, key=lambda p: min(self.index[n] for n in p))
        inside = {n: p for p in parts for n in p}
        for part in parts:
            names = set(part)
            if len(part) > 1:
                names |= self._inner_views(part, inside)
            out.append(make_group(g, names))
        return out

    def _inner_views(self, part: frozenset[str], inside: dict[str, frozenset[str]]) -> set[str]:
        """Views fed by the group whose every (transitive) reader is in the group too."""
        g = self.graph
        views = set()
        for n in part:
            for t in g.op(n).outputs:
                stack = [c for c in g.consumers(t) if c.is_view] if t else []
                while stack:
                    v = stack.pop()
                    readers = _view_readers(g, v)
                    if readers and all(inside.get(r) is part for r in readers):
                        views.add(v.name)
                        stack += [c for c in g.consumers(v.outputs[0]) if c.is_view]
        return views


def _view_readers(g: Graph, view: Op) -> list[str]:
    out, stack = [], [view]
    while stack:
        v = stack.pop()
        for c in g.consumers(v.outputs[0]):
            if c.is_view:
                stack.append(c)
            else:
                out.append(c.name)
        if v.outputs[0] in g.outputs:
            out.append("")
    return out


def _trailing_extent(op: Op, shape: tuple[int, ...], g: Graph) -> int | None:
    """The row length a reduction reduces, if it reduces trailing axes; else None."""
    if not shape:
        return 1
    axes = reduction_axes(op.op_type, dict(op.attributes), op.inputs, shape, g.constants, g.opset)
    if list(axes) != list(range(len(shape) - len(axes), len(shape))):
        return None
    return math.prod(shape[a] for a in axes)
