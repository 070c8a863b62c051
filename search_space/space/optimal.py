"""The exact minimum-cost fusion partition: the ``optimal`` baseline (docs/fusion.md).

Candidates are every connected, convex, legal and feasible group of up to ``max_ops`` kernel
ops (plus the groups of the greedy and max plans, which must always be candidates, plus every
singleton). Under the additive cost (a plan costs the sum of its kernels' standalone costs) the
best plan is an exact set partition of the kernel ops into candidates, solved as a 0/1 ILP with
HiGHS (``scipy.optimize.milp``). Groups that are each convex can still contract into a cycle; a
cyclic answer gets a lazy cut (not every group on the cycle may be chosen) and is re-solved.

The search space may not import the cost model, so costs and feasibility come as callbacks.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_array

from search_space.exceptions import AutofusionError, GraphError
from search_space.fusion import FusionContext
from search_space.ir import OpClass, alias_root

__all__ = [
    "OptimalResult",
    "OptimalUnavailable",
    "candidate_groups",
    "connected_subsets",
    "fusion_adjacency",
    "optimal_partition",
]

logger = logging.getLogger(__name__)

Group = frozenset[str]
# connected groups the enumeration may examine (and refuse) per candidate it may keep: work,
# not seconds, bounds what is found
EXAMINED_PER_CANDIDATE = 50
NO_NODE_LIMIT = 2**31 - 1  # HiGHS's own default


class OptimalUnavailable(AutofusionError):
    """The exact optimum cannot be certified within the limits (no guess is ever returned)."""


@dataclass(frozen=True)
class OptimalResult:
    """The certified minimum-cost partition of the kernel ops.

    Attributes:
        partition: groups of kernel op names, ordered by their first op in the kernel graph.
        cost: the sum of the groups' costs (the callback's values).
        candidates: candidate groups offered to the ILP (singletons and extra groups included).
        cuts: lazy cycle cuts added before the answer was acyclic.
        seconds: wall time of the whole call (enumeration, costing and solving).
        status: "optimal" (anything else is raised as :class:`OptimalUnavailable`).
        blocks: independent subproblems solved (components of the candidate overlap graph).
    """

    partition: list[Group]
    cost: float
    candidates: int
    cuts: int
    seconds: float
    status: str
    blocks: int = 1


# -- candidates -----------------------------------------------------------------------------
def _is_cube_anchor(ctx: FusionContext, name: str) -> bool:
    op = ctx.graph.op(name)
    return op.op_class is OpClass.CUBE and op.unit == "cube"


def fusion_adjacency(ctx: FusionContext) -> dict[str, set[str]]:
    """Undirected adjacency of the fusible kernel ops under which every legal group connects.

    Producer->consumer edges between fusible ops, plus horizontal siblings: cube matmuls that
    read the same activation (through views) are adjacent, exactly as
    :meth:`FusionContext.is_connected` counts them connected. Non-fusible ops get no
    neighbours: they only ever run alone.
    """
    g = ctx.graph
    ok = {n for n in ctx.nodes if ctx.fusible(g.op(n))}
    adj: dict[str, set[str]] = {n: set() for n in ctx.nodes}
    for a in ok:
        for b in ctx.succ[a]:
            if b in ok:
                adj[a].add(b)
                adj[b].add(a)
    siblings: dict[str, set[str]] = {}
    for n in ok:
        if _is_cube_anchor(ctx, n) and g.op(n).inputs and g.op(n).inputs[0]:
            siblings.setdefault(alias_root(g, g.op(n).inputs[0]), set()).add(n)
    for group in siblings.values():
        for n in group:
            adj[n] |= group - {n}
    return adj


def connected_subsets(
    adj: Mapping[str, set[str]], order: Mapping[str, int], max_size: int
) -> Iterator[Group]:
    """Every connected vertex set of 2..``max_size`` vertices, each exactly once (ESU).

    Wernicke's enumeration: a set is grown from its lowest-ordered vertex ``v`` only, and a
    vertex joins the extension set only when it is a new neighbour of the vertex just added
    (not adjacent to the set before), so no set is reached twice.
    """

    def extend(sub: Group, ext: set[str], hood: set[str], low: int) -> Iterator[Group]:
        if len(sub) > 1:
            yield sub
        if len(sub) == max_size:
            return
        ext = set(ext)
        while ext:
            w = min(ext, key=order.__getitem__)  # deterministic order of the yield
            ext.discard(w)
            fresh = {u for u in adj[w] if order[u] > low and u not in hood}
            yield from extend(sub | {w}, ext | fresh, hood | adj[w], low)

    for v in sorted(adj, key=order.__getitem__):
        low = order[v]
        yield from extend(frozenset([v]), {u for u in adj[v] if order[u] > low}, adj[v] | {v}, low)


def candidate_groups(
    ctx: FusionContext,
    *,
    feasible: Callable[[Group], bool] | None = None,
    extra_groups: Iterable[Iterable[str]] = (),
    max_ops: int = 6,
    max_candidates: int = 200_000,
    deadline: float = math.inf,
) -> list[Group]:
    """Singletons, then the extra groups, then every connected legal feasible group.

    Extra groups may name views inside them (as :meth:`FusionContext.to_groups` returns); those
    are dropped, as they are free metadata. Extra groups must be legal (``ctx.check``); their
    feasibility is the caller's word.

    Raises:
        GraphError: an extra group names an unknown op or is not legal.
        OptimalUnavailable: more than ``max_candidates`` candidates, more than
            ``EXAMINED_PER_CANDIDATE`` times as many groups examined, or the deadline passed.
    """
    out: dict[Group, None] = {frozenset([n]): None for n in ctx.nodes}
    for raw in extra_groups:
        names = set(raw)
        unknown = sorted(n for n in names if not ctx.graph.has_op(n))
        if unknown:
            raise GraphError(f"extra group names unknown op {unknown[0]!r}")
        group = frozenset(n for n in names if n in ctx.index)
        if not group:
            continue
        verdict = ctx.check(group)
        if not verdict.ok:
            raise GraphError(f"extra group {sorted(group)} is not legal: {verdict.reason}")
        out.setdefault(group)
    size = min(max_ops, ctx.max_fused_ops)
    seen = 0
    for sub in connected_subsets(fusion_adjacency(ctx), ctx.index, size):
        seen += 1
        if seen > EXAMINED_PER_CANDIDATE * max_candidates:
            raise OptimalUnavailable(
                f"optimal unavailable: more than {seen - 1} connected groups of up to {size} "
                f"ops examined ({EXAMINED_PER_CANDIDATE} x max_candidates={max_candidates}); "
                f"lower max_ops or raise max_candidates"
            )
        if time.monotonic() > deadline:
            raise OptimalUnavailable(
                f"optimal unavailable: time limit hit while enumerating candidates "
                f"({seen} connected groups examined, {len(out)} kept)"
            )
        if sub in out or not ctx.check(sub).ok:
            continue
        if feasible is not None and not feasible(sub):
            continue
        out[sub] = None
        if len(out) > max_candidates:
            raise OptimalUnavailable(
                f"optimal unavailable: more than max_candidates={max_candidates} candidate "
                f"groups of up to {size} ops over {len(ctx.nodes)} kernel ops; lower max_ops "
                f"or raise max_candidates"
            )
    return list(out)


# -- the ILP ---------------------------------------------------------------------------------
@dataclass(eq=False)
class _Block:
    """One independent subproblem: its rows (ops), columns (candidate ids) and cuts."""

    nodes: list[str]
    columns: list[int]
    cuts: list[list[int]] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)
    solved: bool = False


def _blocks(nodes: Sequence[str], groups: Sequence[Group]) -> list[_Block]:
    """Components of the candidate overlap graph (ops linked when some candidate holds both).

    Different blocks share no candidate, so their set partitions are independent; only the
    acyclicity of the whole plan couples them, and a cycle across blocks merges them.
    """
    parent = {n: n for n in nodes}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for grp in groups:
        first, *rest = grp
        for n in rest:
            a, b = find(first), find(n)
            if a != b:
                parent[b] = a
    by_root: dict[str, _Block] = {}
    for n in nodes:
        by_root.setdefault(find(n), _Block([], [])).nodes.append(n)
    for j, grp in enumerate(groups):
        by_root[find(next(iter(grp)))].columns.append(j)
    return list(by_root.values())


def _solve(
    block: _Block, groups: Sequence[Group], costs: np.ndarray, limits: tuple[float, int]
) -> None:
    deadline, nodes = limits
    if all(len(groups[j]) == 1 for j in block.columns):
        block.chosen, block.solved = list(block.columns), True
        return
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise OptimalUnavailable("optimal unavailable: time limit hit before the ILP solve")
    row = {n: i for i, n in enumerate(block.nodes)}
    col = {j: k for k, j in enumerate(block.columns)}
    rows, cols = [], []
    for k, j in enumerate(block.columns):
        for n in groups[j]:
            rows.append(row[n])
            cols.append(k)
    shape = (len(block.nodes), len(block.columns))
    a = csr_array((np.ones(len(rows)), (rows, cols)), shape=shape)
    constraints = [LinearConstraint(a, 1.0, 1.0)]
    if block.cuts:
        crow = [i for i, cut in enumerate(block.cuts) for _ in cut]
        ccol = [col[j] for cut in block.cuts for j in cut]
        c = csr_array((np.ones(len(crow)), (crow, ccol)), shape=(len(block.cuts), shape[1]))
        ub = np.array([len(cut) - 1 for cut in block.cuts], dtype=float)
        constraints.append(LinearConstraint(c, -np.inf, ub))
    res = milp(
        costs[block.columns],
        integrality=np.ones(shape[1]),
        bounds=Bounds(0.0, 1.0),
        constraints=constraints,
        options={
            "time_limit": remaining,
            "node_limit": nodes,
            "mip_rel_gap": 0.0,
            "presolve": True,
        },
    )
    if res.status != 0 or res.x is None:
        why = "a time or node limit hit" if res.status == 1 else f"HiGHS status {res.status}"
        raise OptimalUnavailable(
            f"optimal unavailable: the ILP over {shape[1]} candidates and {shape[0]} ops was "
            f"not solved to optimality ({why}: {res.message})"
        )
    block.chosen = [block.columns[k] for k in np.flatnonzero(res.x > 0.5)]
    block.solved = True
    covered = sorted(n for j in block.chosen for n in groups[j])
    if covered != sorted(block.nodes):
        raise OptimalUnavailable("optimal unavailable: the solver's answer is not a partition")


def _cycles(ctx: FusionContext, chosen: Sequence[int], groups: Sequence[Group]) -> list[list[int]]:
    """One cycle (as candidate ids) per strongly connected part of the contracted plan."""
    owner = {n: j for j in chosen for n in groups[j]}
    dag = nx.DiGraph()
    dag.add_nodes_from(chosen)
    for n, j in owner.items():
        dag.add_edges_from((j, owner[m]) for m in ctx.succ[n] if owner[m] != j)
    out = []
    for scc in nx.strongly_connected_components(dag):
        if len(scc) > 1:
            out.append(sorted({u for u, _ in nx.find_cycle(dag.subgraph(scc))}))
    return out


def optimal_partition(
    ctx: FusionContext,
    cost: Callable[[Group], float],
    *,
    feasible: Callable[[Group], bool] | None = None,
    extra_groups: Iterable[Iterable[str]] = (),
    max_ops: int = 6,
    time_limit: float = 60.0,
    max_candidates: int = 200_000,
    node_limit: int = NO_NODE_LIMIT,
) -> OptimalResult:
    """The minimum-cost partition of the kernel ops into legal groups, acyclic when contracted.

    Exact for the additive cost over the candidate set: singletons, ``extra_groups`` (pass the
    greedy and max plans so that ``optimal <= greedy, max`` holds by construction) and every
    connected, convex, legal, feasible group of up to ``max_ops`` kernel ops.

    Args:
        ctx: the kernel graph and its legality rules.
        cost: a group's cost (the best config's standalone latency); finite for every
            singleton. A non-finite cost drops a fused candidate.
        feasible: whether some config fits the buffers; None accepts every legal group.
            Singletons and extra groups are not asked.
        extra_groups: groups that must be candidates whatever their size.
        max_ops: the largest enumerated group, in kernel ops.
        time_limit: seconds for the whole call (enumeration, costing, every solve): a hang
            guard; what is found within the work bounds below does not depend on it.
        max_candidates: the most candidate groups the ILP may get (each costed once).
        node_limit: the most branch-and-bound nodes of each ILP solve (HiGHS).

    Raises:
        OptimalUnavailable: too many candidates, the time limit hit, a singleton without a
            finite cost, or a solver that did not prove optimality.
        GraphError: an extra group that names an unknown op or is not legal.
    """
    # Long by design: candidate enumeration, costing, blocks and the lazy cycle-cutting ILP loop
    # share their state.
    start = time.monotonic()
    deadline = start + time_limit
    groups = candidate_groups(
        ctx,
        feasible=feasible,
        extra_groups=extra_groups,
        max_ops=max_ops,
        max_candidates=max_candidates,
        deadline=deadline,
    )
    kept: list[Group] = []
    values: list[float] = []
    for i, grp in enumerate(groups):
        if time.monotonic() > deadline:
            raise OptimalUnavailable(
                f"optimal unavailable: time limit hit while costing candidates "
                f"({i} of {len(groups)} costed)"
            )
        value = float(cost(grp))
        if not math.isfinite(value):
            if len(grp) == 1:
                raise OptimalUnavailable(
                    f"optimal unavailable: op {next(iter(grp))!r} alone has cost {value}"
                )
            continue
        kept.append(grp)
        values.append(value)
    costs = np.asarray(values, dtype=float)

    blocks = _blocks(ctx.nodes, kept)
    cuts = 0
    while True:
        for block in blocks:
            if not block.solved:
                _solve(block, kept, costs, (deadline, node_limit))
        chosen = [j for block in blocks for j in block.chosen]
        cycles = _cycles(ctx, chosen, kept)
        if not cycles:
            break
        for cycle in cycles:
            cuts += 1
            involved = [b for b in blocks if set(b.columns) & set(cycle)]
            merged = _Block(
                [n for b in involved for n in b.nodes],
                sorted(j for b in involved for j in b.columns),
                [c for b in involved for c in b.cuts] + [cycle],
            )
            blocks = [b for b in blocks if all(b is not x for x in involved)] + [merged]
        logger.debug("optimal: %d cycle(s) cut, re-solving", len(cycles))

    partition = sorted((kept[j] for j in chosen), key=lambda p: min(ctx.index[n] for n in p))
    total = float(sum(costs[j] for j in chosen))
    seconds = time.monotonic() - start
    logger.info(
        "optimal: %d ops, %d candidates, %d block(s), %d cut(s), cost %.3f in %.2fs",
        len(ctx.nodes),
        len(kept),
        len(blocks),
        cuts,
        total,
        seconds,
    )
    return OptimalResult(partition, total, len(kept), cuts, seconds, "optimal", len(blocks))
