"""The exact optimum: a legal acyclic partition, never worse than any plan it was offered,
equal to brute force over all partitions on tiny DAGs, with lazy cycle cuts when needed (on a
zoo model with the real cost oracle: tests/costmodel/test_search_space_costed.py)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable

import networkx as nx
import pytest
from conftest import make, weight_inputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper

from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.ir import Graph
from search_space.space import connected_subsets, optimal_partition

D = 32
Group = frozenset[str]


# -- helpers (independent of the code under test) ---------------------------------------------
def contraction(ctx: FusionContext, partition: Iterable[Group]) -> nx.DiGraph:
    owner = {n: i for i, part in enumerate(partition) for n in part}
    dag = nx.DiGraph()
    dag.add_nodes_from(set(owner.values()))
    for n in ctx.nodes:
        for m in ctx.succ[n]:
            if owner[n] != owner[m]:
                dag.add_edge(owner[n], owner[m])
    return dag


def assert_legal_partition(ctx: FusionContext, partition: list[Group]) -> None:
    flat = [n for part in partition for n in part]
    assert sorted(flat) == sorted(ctx.nodes), "not a partition of the kernel ops"
    for part in partition:
        assert ctx.check(part).ok, (sorted(part), ctx.check(part).reason)
    assert nx.is_directed_acyclic_graph(contraction(ctx, partition))


def plan_cost(partition: Iterable[Group], cost: Callable[[Group], float]) -> float:
    return sum(cost(part) for part in partition)


def synthetic_cost(ctx: FusionContext) -> Callable[[Group], float]:
    """Launch constant + tensors crossing the kernel boundary + a superlinear size term."""

    def cost(ops: Group) -> float:
        group = ctx.to_groups([ops])[0]
        return 4.0 + len(group.inputs) + len(group.outputs) + 0.35 * len(ops) ** 2

    return cost


def brute_force(
    ctx: FusionContext,
    cost: Callable[[Group], float],
    max_ops: int,
    allowed: Callable[[Group], bool] = lambda ops: True,
) -> float:
    """Minimum over every partition of the kernel ops into legal (and allowed) groups, acyclic
    when contracted: all subsets, no connectivity enumeration, branch and bound on the cost."""
    nodes = list(ctx.nodes)
    legal: dict[str, list[tuple[Group, float]]] = {n: [] for n in nodes}
    for size in range(1, min(max_ops, len(nodes)) + 1):
        for combo in itertools.combinations(nodes, size):
            group = frozenset(combo)
            if ctx.check(group).ok and (size == 1 or allowed(group)):
                legal[min(group, key=ctx.index.__getitem__)].append((group, cost(group)))
    best = math.inf

    def rec(left: frozenset[str], chosen: list[Group], total: float) -> None:
        nonlocal best
        if total >= best - 1e-9:
            return
        if not left:
            if nx.is_directed_acyclic_graph(contraction(ctx, chosen)):
                best = total
            return
        first = min(left, key=ctx.index.__getitem__)
        for group, value in legal[first]:
            if group <= left:
                rec(left - group, [*chosen, group], total + value)

    rec(frozenset(nodes), [], 0.0)
    return best


# -- connected subset enumeration -------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.floats(0.1, 0.7), st.integers(0, 10_000), st.integers(1, 5))
def test_connected_subsets_are_all_connected_sets_once(
    n: int, p: float, seed: int, k: int
) -> None:
    und = nx.gnp_random_graph(n, p, seed=seed)
    adj = {str(v): {str(u) for u in und[v]} for v in und}
    order = {str(v): v for v in und}
    got = list(connected_subsets(adj, order, k))
    assert len(got) == len(set(got)), "a set was yielded twice"
    want = {
        frozenset(str(v) for v in combo)
        for size in range(2, k + 1)
        for combo in itertools.combinations(und.nodes, size)
        if nx.is_connected(und.subgraph(combo))
    }
    assert set(got) == want


# -- tiny random DAGs against brute force -----------------------------------------------------
@st.composite
def tiny_dags(draw) -> Graph:
    n = draw(st.integers(2, 10))
    tensors = ["x"]
    nodes, weights = [], []
    for i in range(n):
        kind = draw(
            st.sampled_from(["MatMul", "MatMulAct", "Add", "Relu", "Softmax", "LayerNorm"])
        )
        a = draw(st.sampled_from(tensors))
        out, name = f"t{i}", f"op{i}"
        if kind == "MatMul":
            weights.append(helper.make_tensor_value_info(f"w{i}", T.FLOAT, [D, D]))
            nodes.append(helper.make_node("MatMul", [a, f"w{i}"], [out], name=name))
        elif kind == "MatMulAct":  # both operands activations: no horizontal edge
            b = draw(st.sampled_from(tensors))
            nodes.append(helper.make_node("MatMul", [a, b], [out], name=name))
        elif kind == "Add":
            b = draw(st.sampled_from(tensors))
            nodes.append(helper.make_node("Add", [a, b], [out], name=name))
        elif kind == "LayerNorm":
            weights.append(helper.make_tensor_value_info(f"g{i}", T.FLOAT, [D]))
            nodes.append(
                helper.make_node("LayerNormalization", [a, f"g{i}"], [out], name=name, axis=-1)
            )
        elif kind == "Softmax":
            nodes.append(helper.make_node(kind, [a], [out], name=name, axis=-1))
        else:
            nodes.append(helper.make_node(kind, [a], [out], name=name))
        tensors.append(out)
    used = {t for node in nodes for t in node.input}
    outs = [helper.make_tensor_value_info(t, T.FLOAT, [D, D]) for t in tensors if t not in used]
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, [D, D]), *weights]
    model = weight_inputs(make(nodes, inputs, outs), [w.name for w in weights])
    return load_graph(model)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_dags())
def test_optimal_equals_brute_force_on_tiny_dags(graph: Graph) -> None:
    ctx = FusionContext(graph)
    cost = synthetic_cost(ctx)
    res = optimal_partition(ctx, cost, max_ops=len(ctx.nodes))
    assert res.status == "optimal"
    assert_legal_partition(ctx, res.partition)
    assert res.cost == pytest.approx(plan_cost(res.partition, cost))
    assert res.cost == pytest.approx(brute_force(ctx, cost, len(ctx.nodes)))
    assert res.cost <= plan_cost(ctx.repair(ctx.edges), cost) + 1e-9


def test_brute_force_agrees_with_a_size_limit() -> None:
    """max_ops binds: the optimum over groups of <= 2 ops of a 5-op vector chain."""
    n = helper.make_node
    nodes = [
        n("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"], name=f"r{i}") for i in range(5)
    ]
    x = helper.make_tensor_value_info("x", T.FLOAT, [16, D])
    y = helper.make_tensor_value_info("t4", T.FLOAT, [16, D])
    ctx = FusionContext(load_graph(make(nodes, [x], [y])))
    cost = synthetic_cost(ctx)
    res = optimal_partition(ctx, cost, max_ops=2)
    assert max(len(p) for p in res.partition) <= 2
    assert res.cost == pytest.approx(brute_force(ctx, cost, 2))


# -- lazy cycle cuts --------------------------------------------------------------------------
def crossed_pair() -> Graph:
    """Two vector chains that feed each other crosswise: p -> {a1, a2}, q -> {b1, b2},
    a1 -> b1 and b2 -> a2. {p, a1, a2} and {q, b1, b2} are each convex and legal, but
    together they contract into a cycle; so does every other split into two triples."""
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["p"], name="p"),
        n("Relu", ["y"], ["q"], name="q"),
        n("Neg", ["p"], ["a1"], name="a1"),
        n("Neg", ["q"], ["b2"], name="b2"),
        n("Add", ["q", "a1"], ["b1"], name="b1"),
        n("Add", ["p", "b2"], ["a2"], name="a2"),
    ]
    vi = [helper.make_tensor_value_info(t, T.FLOAT, [16, D]) for t in ("x", "y", "a2", "b1")]
    return load_graph(make(nodes, vi[:2], vi[2:]))


def test_groups_that_contract_into_a_cycle_are_cut() -> None:
    ctx = FusionContext(crossed_pair())
    left, right = frozenset({"p", "a1", "a2"}), frozenset({"q", "b1", "b2"})
    assert ctx.check(left).ok and ctx.check(right).ok
    assert not nx.is_directed_acyclic_graph(contraction(ctx, [left, right]))

    def cost(ops: Group) -> float:  # launches dominate: two triples look cheapest
        return 10.0 + 0.01 * len(ops)

    res = optimal_partition(ctx, cost, max_ops=3)
    assert res.cuts > 0
    assert_legal_partition(ctx, res.partition)
    assert len(res.partition) == 3
    assert res.cost == pytest.approx(brute_force(ctx, cost, 3))


def test_a_cycle_across_independent_blocks_merges_them() -> None:
    """Only subsets of the two triples are feasible, so they are solved as separate blocks;
    each block's optimum is its whole triple, the two together are cyclic, and the cut must
    couple the blocks."""
    ctx = FusionContext(crossed_pair())
    left, right = frozenset({"p", "a1", "a2"}), frozenset({"q", "b1", "b2"})

    def feasible(ops: Group) -> bool:
        return ops <= left or ops <= right

    def cost(ops: Group) -> float:
        return 10.0 + 0.01 * len(ops)

    res = optimal_partition(ctx, cost, feasible=feasible, max_ops=3)
    assert res.cuts > 0 and res.blocks == 1
    assert_legal_partition(ctx, res.partition)
    assert all(feasible(p) for p in res.partition)
    assert res.cost == pytest.approx(brute_force(ctx, cost, 3, feasible))
