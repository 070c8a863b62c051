"""The deterministic repair (docs/fusion.md): any set of chosen edges becomes a legal partition,
and a partition becomes FusionGroups (views between members included)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from search_space.fusion.kernel_graph import Edge, KernelGraph
from search_space.fusion.legality import legal
from search_space.ir import FusionGroup, Graph, Op, make_group

__all__ = ["repair", "to_groups"]


def repair(
    kg: KernelGraph,
    edges: Sequence[Edge],
    chosen: Iterable[Edge],
    feasible: Callable[[frozenset[str]], bool] | None = None,
) -> list[frozenset[str]]:
    """Union the chosen edges into groups, skipping (splitting at) any edge whose merge would
    be illegal. Deterministic: edges are taken in the order of ``edges`` (every fusible edge).

    Returns:
        A partition of the kernel ops into legal, convex groups whose contraction is acyclic.
    """
    group: dict[str, frozenset[str]] = {n: frozenset([n]) for n in kg.nodes}
    order = {e: i for i, e in enumerate(edges)}
    pending = sorted(set(chosen), key=lambda e: order.get(e, len(order)))
    while pending:  # an edge refused now may become legal once others have merged
        skipped = []
        for edge in pending:
            a, b = group[edge.src], group[edge.dst]
            if a is b:
                continue
            merged = a | b
            if (
                _cycle_through(kg, a, b, group)
                or not legal(kg, merged)
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
    for n in kg.nodes:
        seen.setdefault(group[n])
    return list(seen)


def _cycle_through(
    kg: KernelGraph, a: frozenset[str], b: frozenset[str], group: dict[str, frozenset[str]]
) -> bool:
    """Would merging ``a`` and ``b`` close a cycle through other groups?"""
    return _path_via_others(kg, a, b, group) or _path_via_others(kg, b, a, group)


def _path_via_others(
    kg: KernelGraph, a: frozenset[str], b: frozenset[str], group: dict[str, frozenset[str]]
) -> bool:
    limit = _reach_bound(kg, b, group)
    start = {group[m] for n in a for m in kg.succ[n]} - {a, b}
    todo = [g for g in start if min(kg.index[n] for n in g) <= limit]
    seen = set(todo)
    while todo:
        cur = todo.pop()
        for n in cur:
            for m in kg.succ[n]:
                if m in b:
                    return True
                nxt = group[m]
                if nxt is a or nxt in seen:
                    continue
                if min(kg.index[x] for x in nxt) <= limit:
                    seen.add(nxt)
                    todo.append(nxt)
    return False


def _reach_bound(kg: KernelGraph, b: frozenset[str], group: dict[str, frozenset[str]]) -> int:
    """An index no group starting after it can reach ``b`` from (docs/fusion.md, "Repair").

    Edges run forward in the index, so a path only goes back inside a group: entered at a late
    op, left at an early one. From ops after the bound a path must enter a group that starts
    at or before it and ends after it to come back; the bound is the smallest index past the
    last op of ``b`` with no such group."""
    last = {part: max(kg.index[n] for n in part) for part in set(group.values())}
    bound = max(kg.index[n] for n in b)
    reach = 0  # the last op of any group with an op at or before the index walked
    for i, n in enumerate(kg.nodes):
        if i > bound:
            break
        reach = max(reach, last[group[n]])
        bound = max(bound, reach)
    return bound


def to_groups(kg: KernelGraph, partition: Iterable[frozenset[str]]) -> list[FusionGroup]:
    """FusionGroups (views between members included) in kernel-graph order."""
    g = kg.graph
    out = []
    memo = kg.group_memo  # a part's group depends on the part alone (frozen, so shared)
    for part in sorted(partition, key=lambda p: min(kg.index[n] for n in p)):
        group = memo.get(part)
        if group is None:
            names = set(part)
            if len(part) > 1:
                names |= _inner_views(g, part)
            if len(memo) >= 200_000:  # a bound on memory, far above a study's needs
                memo.clear()
            group = memo[part] = make_group(g, names)
        out.append(group)
    return out


def _inner_views(g: Graph, part: frozenset[str]) -> set[str]:
    """Views fed by the group whose every (transitive) reader is in the group too."""
    views = set()
    for n in part:
        for t in g.op(n).outputs:
            stack = [c for c in g.consumers(t) if c.is_view] if t else []
            while stack:
                v = stack.pop()
                readers = _view_readers(g, v)
                if readers and all(r in part for r in readers):
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
