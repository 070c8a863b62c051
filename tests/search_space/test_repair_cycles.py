"""The repair's cycle check (search_space/fusion/repair.py, and its incremental twin in
search_space/fusion/incremental.py), held to independent oracles built with networkx.

A merge the cycle check must refuse is one legality's own convexity test lets through: the
path that closes the cycle runs through another *group* (it enters the group at one op and
leaves it at another that op does not reach), so no path of ops leaves the merge and comes
back. The corners below are small graphs where such a path

* runs only from the second group of a merge back to the first (the reverse direction): the
  merge is a horizontal one, of sibling matmuls, with no edge between them;
* passes through a group whose first op sits right before the last op of the group the path
  runs to: the tightest case of the search's bound (a group that starts after that op is
  taken not to reach it), once as the first group the path enters and once as a later one.

Each corner is repaired alone (the contraction of its partition is acyclic and is the one
expected) and among random ops woven in, where an observer in the feasibility callback (which
a repair asks only about a merge its cycle check and legality let through) checks every merge
taken against the contraction at that moment; random DAGs get the same observer.

That observer holds the check to the full property: no merge it lets through has any path
between the two groups through other groups. The search's bound is the corner it must get
right: a group that starts after the far group ends can still reach it through a group spanning
that end, once earlier merges have made one (a merge retried in a later pass). The tests at the
end are the smallest such cases found; both repairs returned a cyclic contraction there before
the bound took spanning groups into account.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import networkx as nx
import numpy as np
import onnx
import pytest
from conftest import make
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper

from search_space import load_graph
from search_space.fusion import Edge, FusionContext
from search_space.fusion.incremental import Repairer
from search_space.fusion.repair import repair as plain

Feasible = Callable[[frozenset[str]], bool] | None


def _graph(ops: list[tuple[str, str, list[str]]], max_fused_ops: int = 16) -> FusionContext:
    """A kernel graph from ``(name, op type, inputs)`` rows, in topological order; an op's
    output tensor is its name, ``x`` the input, and a MatMul reads a weight of its own."""
    nodes, inits = [], []
    for name, kind, inputs in ops:
        if kind == "MatMul":
            w = f"w_{name}"
            inits.append(onnx.numpy_helper.from_array(np.ones((8, 8), np.float32), w))
            inputs = [*inputs, w]
        nodes.append(helper.make_node(kind, inputs, [name], name=name))
    model = make(
        nodes,
        [helper.make_tensor_value_info("x", T.FLOAT, [4, 8])],
        [helper.make_tensor_value_info(name, T.FLOAT, None) for name, _, _ in ops],
        inits,
    )
    ctx = FusionContext(load_graph(model), max_fused_ops=max_fused_ops)
    assert ctx.nodes == tuple(name for name, _, _ in ops)  # the index is the order written
    return ctx


def _edges(ctx: FusionContext, *pairs: tuple[str, str]) -> list[Edge]:
    """The fusible edges between the given ops (either way round), one per pair."""
    out = []
    for s, d in pairs:
        found = [e for e in ctx.edges if {e.src, e.dst} == {s, d}]
        assert len(found) == 1, (s, d, found)
        out.append(found[0])
    return out


def _contracted_is_acyclic(ctx: FusionContext, partition: list[frozenset[str]]) -> bool:
    """The oracle: a partition of the kernel ops, and its contraction has no cycle (so every
    group is convex too: a path leaving a group and re-entering it would be a cycle)."""
    assert sorted(n for p in partition for n in p) == sorted(ctx.nodes)
    where = {n: i for i, p in enumerate(partition) for n in p}
    contracted = nx.DiGraph()
    contracted.add_nodes_from(range(len(partition)))
    contracted.add_edges_from(
        (where[n], where[m]) for n in ctx.nodes for m in ctx.succ[n] if where[n] != where[m]
    )
    return nx.is_directed_acyclic_graph(contracted)


def _ops_convex(ctx: FusionContext, group: frozenset[str]) -> bool:
    """Convex by ops alone (networkx): no op outside the group both follows and precedes it."""
    ops = nx.DiGraph([(n, m) for n in ctx.nodes for m in ctx.succ[n]])
    ops.add_nodes_from(ctx.nodes)
    after = set().union(*(nx.descendants(ops, n) for n in group)) - group
    before = set().union(*(nx.ancestors(ops, n) for n in group)) - group
    return not (after & before)


def _repairs(
    ctx: FusionContext, chosen: Iterable[Edge], feasible: Feasible
) -> dict[str, list[frozenset[str]]]:
    chosen = list(chosen)
    return {
        "plain": plain(ctx, ctx.edges, chosen, feasible),
        "incremental": Repairer(ctx, ctx.edges, feasible).repair(chosen),
    }


def _refusing(*groups: Iterable[str]) -> Callable[[frozenset[str]], bool]:
    refused = {frozenset(g) for g in groups}
    return lambda ops: ops not in refused


@dataclass(frozen=True)
class Corner:
    """A small graph whose chosen edges include a merge only the cycle check refuses."""

    ops: tuple[tuple[str, str, tuple[str, ...]], ...]  # (name, op type, inputs), in order
    chosen: tuple[tuple[str, str], ...]  # the chosen edges, by their two ends
    refused: tuple[frozenset[str], ...]  # groups feasibility refuses (a pass retries later)
    bad: tuple[frozenset[str], ...]  # the partition the refused merge would make
    want: frozenset[frozenset[str]]  # the partition the repair makes

    def ctx(self) -> FusionContext:
        return _graph([(n, k, list(i)) for n, k, i in self.ops])


def _parts(*groups: str) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(g.split()) for g in groups)


def _reverse(tight: bool) -> Corner:
    """Sibling matmuls m1, m2 (a horizontal edge, m1 first: no edge joins them); m1's
    epilogue e1 also reads g0, and g1 reads g0 and m2. With {m1, e1} and {g0, g1} merged,
    m2 -> g1 ~ g0 -> e1 is a path from m2's group back to m1's through {g0, g1}, and none runs
    the other way. The horizontal edge comes first: refused as {m1, m2}, it is retried in a
    second pass as {m1, e1} | {m2}. ``tight`` puts e1 (the last op of m1's group) right after
    g0 (the first of {g0, g1}): the pruning bound of the reverse search."""
    e1 = ("e1", "Add", ("m1", "g0"))
    g1 = ("g1", "Add", ("g0", "m2"))
    return Corner(
        ops=(
            ("m1", "MatMul", ("x",)),
            ("m2", "MatMul", ("x",)),
            ("g0", "Relu", ("x",)),
            *((e1, g1) if tight else (g1, e1)),
        ),
        chosen=(("m1", "m2"), ("m1", "e1"), ("g0", "g1")),
        refused=_parts("m1 m2"),
        bad=_parts("m1 e1 m2", "g0 g1"),
        want=frozenset(_parts("m1 e1", "m2", "g0 g1")),
    )


CORNERS = {
    # a path only from the second group of a merge back to the first
    "reverse": _reverse(tight=False),
    # the same, through a group that starts one op before the first group ends
    "reverse-tight": _reverse(tight=True),
    # a feeds b and g1; g0 feeds b and g1. With {g0, g1} merged, merging a into b closes
    # a -> g1 ~ g0 -> b, and g0 sits right before b, the end of b's group: the first group the
    # search enters is at the bound. The merge is refused as {a, b} in the first pass (before
    # {g0, g1} exists: its edge comes after) and retried in the second as {a, a2} | {b}.
    "forward-tight-first": Corner(
        ops=(
            ("a", "Relu", ("x",)),
            ("g0", "Relu", ("x",)),
            ("b", "Add", ("a", "g0")),
            ("g1", "Add", ("g0", "a")),
            ("a2", "Relu", ("a",)),
        ),
        chosen=(("a", "b"), ("g0", "g1"), ("a", "a2")),
        refused=_parts("a b"),
        bad=_parts("a a2 b", "g0 g1"),
        want=frozenset(_parts("a a2", "b", "g0 g1")),
    ),
    # h2 feeds h1 and g; a feeds h1 and b; g feeds b. With {h2, h1} merged, merging a and b
    # closes a -> h1 ~ h2 -> g -> b: the search enters {h2, h1} (well before b) and reaches g
    # from it, and g sits right before b: a later group at the bound. One pass.
    "forward-tight-later": Corner(
        ops=(
            ("h2", "Relu", ("x",)),
            ("a", "Relu", ("x",)),
            ("h1", "Add", ("h2", "a")),
            ("g", "Relu", ("h2",)),
            ("b", "Add", ("a", "g")),
        ),
        chosen=(("h2", "h1"), ("a", "b")),
        refused=(),
        bad=_parts("h2 h1", "a b", "g"),
        want=frozenset(_parts("h2 h1", "a", "b", "g")),
    ),
}


@pytest.mark.parametrize("name", CORNERS)
def test_the_merge_only_the_cycle_check_refuses_closes_a_cycle(name: str) -> None:
    """The merge is legal (legality's convexity, by ops, does not see the path through the
    other group) and its partition's contraction has a cycle: only the cycle check keeps it
    out, and the oracle sees it."""
    corner = CORNERS[name]
    ctx = corner.ctx()
    assert all(ctx.check(p).ok and _ops_convex(ctx, p) for p in corner.bad)
    assert not _contracted_is_acyclic(ctx, list(corner.bad))


@pytest.mark.parametrize("name", CORNERS)
def test_a_merge_closing_a_cycle_through_another_group_is_refused(name: str) -> None:
    corner = CORNERS[name]
    ctx = corner.ctx()
    chosen = _edges(ctx, *corner.chosen)
    for repair, partition in _repairs(ctx, chosen, _refusing(*corner.refused)).items():
        assert _contracted_is_acyclic(ctx, partition), (repair, partition)
        assert set(partition) == corner.want, repair


# --- every merge taken, checked against the contraction at that moment ----------------------


class _Observer:
    """A feasibility callback (``inner``'s answer, a pure function of the ops) that follows
    the repair's partition: a repair asks it only about a merge its cycle check and legality
    let through, and merges when it says yes. Each merge taken is checked against the
    contraction just before it: any path between the two groups through other groups closes a
    cycle, and the cycle check must have found it."""

    def __init__(self, ctx: FusionContext, inner: Feasible) -> None:
        self.ctx, self.inner = ctx, inner
        self.part = {n: frozenset([n]) for n in ctx.nodes}
        self.missed: list[tuple[list[str], list[str]]] = []

    def __call__(self, merged: frozenset[str]) -> bool:
        ok = self.inner is None or self.inner(merged)
        if ok:
            x, y = {self.part[n] for n in merged}  # exactly two groups of the partition
            if self._path(x, y) or self._path(y, x):
                self.missed.append((sorted(x), sorted(y)))
            for n in merged:
                self.part[n] = merged
        return ok

    def _path(self, x: frozenset[str], y: frozenset[str]) -> bool:
        contracted = nx.DiGraph()
        contracted.add_nodes_from(set(self.part.values()))
        contracted.add_edges_from(
            (self.part[n], self.part[m])
            for n in self.ctx.nodes
            for m in self.ctx.succ[n]
            if self.part[n] != self.part[m]
        )
        contracted.remove_edges_from([(x, y)])  # through other groups only
        return nx.has_path(contracted, x, y)


def _observed(ctx: FusionContext, chosen: Iterable[Edge], inner: Feasible) -> None:
    chosen = list(chosen)
    for name, run in (
        ("plain", lambda f: plain(ctx, ctx.edges, chosen, f)),
        ("incremental", lambda f: Repairer(ctx, ctx.edges, f).repair(chosen)),
    ):
        observer = _Observer(ctx, inner)
        partition = run(observer)
        assert not observer.missed, (name, observer.missed)
        assert set(partition) == set(observer.part.values()), name  # it followed the repair


def _woven(corner: Corner, rnd: random.Random) -> FusionContext:
    """The corner with one to five random ops woven in: siblings of the matmuls, or unary and
    binary ops reading any earlier tensor (so they add paths and groups around the corner)."""
    ops = list(corner.ops)
    for i in range(rnd.randint(1, 5)):
        at = rnd.randint(0, len(ops))
        earlier = ["x", *(n for n, _, _ in ops[:at])]
        kind = rnd.choice(["MatMul", "Relu", "Add"])
        inputs = ["x"] if kind == "MatMul" else rnd.choices(earlier, k=1 + (kind == "Add"))
        ops.insert(at, (f"z{i}", kind, tuple(inputs)))
    return _graph([(n, k, list(i)) for n, k, i in ops])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CORNERS)), seed=st.integers(0, 2**32 - 1))
def test_corners_among_random_ops_take_no_merge_the_check_should_refuse(
    name: str, seed: int
) -> None:
    """The corner's edges and a few random others chosen; feasibility refuses the corner's
    groups (so its merge is retried in a later pass, as in the corner)."""
    corner, rnd = CORNERS[name], random.Random(seed)
    ctx = _woven(corner, rnd)
    for _ in range(8):
        chosen = set(_edges(ctx, *corner.chosen)) | {e for e in ctx.edges if rnd.random() < 0.3}
        _observed(ctx, sorted(chosen), _refusing(*corner.refused))


@st.composite
def _dags(draw: st.DrawFn) -> FusionContext:
    """Sibling matmuls on the input (horizontal merges, whose two ends no edge joins), unary
    ops and joins of a recent branch with any earlier one: groups that a path enters at one op
    and leaves at another are common."""
    ops: list[tuple[str, str, list[str]]] = []
    tensors = ["x"]
    for i in range(draw(st.integers(5, 20))):
        kind = draw(st.sampled_from(["MatMul", "MatMul", "Relu", "Add", "Add"]))
        if kind == "MatMul":
            inputs = ["x"]
        elif kind == "Relu":
            inputs = [draw(st.sampled_from(tensors))]
        else:
            inputs = [draw(st.sampled_from(tensors[-3:])), draw(st.sampled_from(tensors))]
        ops.append((f"n{i}", kind, inputs))
        tensors.append(f"n{i}")
    return _graph(ops, max_fused_ops=draw(st.integers(3, 8)))


def _some_refused(seed: int) -> Callable[[frozenset[str]], bool]:
    """A pure feasibility callback refusing a third of the groups of up to four ops: a merge
    it refuses is retried in a later pass, between bigger groups (past other merges)."""
    return lambda ops: len(ops) > 4 or zlib.crc32(f"{seed}:{sorted(ops)}".encode()) % 3 != 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ctx=_dags(), seed=st.integers(0, 2**32 - 1))
def test_random_dags_take_no_merge_the_check_should_refuse(ctx: FusionContext, seed: int):
    """Many edge sets per graph (a repair costs far less than building the graph)."""
    rng = np.random.default_rng(seed)
    for _ in range(15):
        chosen = [e for e, u in zip(ctx.edges, rng.random(len(ctx.edges)), strict=True) if u < 0.8]
        inner = None if rng.random() < 0.2 else _some_refused(int(rng.integers(1000)))
        _observed(ctx, chosen, inner)


# --- a path through a group that starts after the far group ends ----------------------------


def test_a_path_through_a_group_past_the_end_is_refused_with_feasibility() -> None:
    """{h2, h1} is refused in the first pass; {h1, z} and {a, b} are merged. In the second
    pass h2 -> g -> b ~ a -> h1 is a path from {h2} to {h1, z} through {g} (which starts after
    z) and {a, b}: merging them closes a cycle, and the search never enters {g}."""
    ctx = _graph(
        [
            ("h2", "Relu", ["x"]),
            ("a", "Relu", ["x"]),
            ("h1", "Add", ["h2", "a"]),
            ("z", "Relu", ["h1"]),
            ("g", "Relu", ["h2"]),
            ("b", "Add", ["a", "g"]),
        ]
    )
    chosen = _edges(ctx, ("h2", "h1"), ("h1", "z"), ("a", "b"))
    feasible = _refusing({"h2", "h1"})
    got = {**_repairs(ctx, chosen, feasible), "context": ctx.repair(chosen, feasible)}
    assert all(_contracted_is_acyclic(ctx, p) for p in got.values()), got


def test_a_path_through_a_group_past_the_end_is_refused_without_feasibility() -> None:
    """As above with no feasibility callback: the cycle check itself refuses h2 -> h1 in the
    first pass (h2 -> y -> h1), and the second pass merges h2 into {y, h1, t} although
    h2 -> g -> b ~ a -> t runs through {g} (after t) and {a, b}."""
    ctx = _graph(
        [
            ("h2", "Relu", ["x"]),
            ("y", "Relu", ["h2"]),
            ("h1", "Add", ["h2", "y"]),
            ("a", "Relu", ["x"]),
            ("t", "Add", ["h1", "a"]),
            ("g", "Relu", ["h2"]),
            ("b", "Add", ["a", "g"]),
        ]
    )
    chosen = _edges(ctx, ("h2", "h1"), ("y", "h1"), ("h1", "t"), ("a", "b"))
    got = {**_repairs(ctx, chosen, None), "context": ctx.repair(chosen)}
    assert all(_contracted_is_acyclic(ctx, p) for p in got.values()), got
