"""The search space, its baselines and the exact optimum with their configs and costs from
the real cost oracle (the tests of search_space import only search_space, so the tests that
need the oracle sit with the cost model's): plans replay, the spaces a policy shapes, the local
search's moves, forbidden signatures, optimal <= max, greedy <= none on every zoo model, and
the optimum on a small BERT."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import optuna
import pytest
from fusion_helpers import assert_legal_partition, random_dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.exceptions import AutofusionError, GraphError
from search_space.fusion import FusionContext
from search_space.space import (
    OptimalUnavailable,
    SearchSpace,
    baseline_plan,
    optimal_partition,
    plan_cost,
)
from search_space.zoo import build, list_models

SMALL = {"llama3-8b": {"scale": 0.05, "layers": 2}}
Group = frozenset[str]


# -- the space (was tests/search_space/test_fusion.py) ------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.integers(0, 2**16))
def test_a_plan_replays_through_fixed_trial(case, seed: int) -> None:
    model, _ = case
    graph = load_graph(model)
    ctx = FusionContext(graph)
    space = SearchSpace(ctx, CostOracle(graph, load_target()))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    trial = study.ask()
    plan = space.suggest(trial)
    replay = space.suggest(optuna.trial.FixedTrial(trial.params))
    assert replay == plan and replay.key() == plan.key()


@pytest.mark.parametrize("name", ["bert-base", "llama3-8b", "resnet50", "gpt2"])
def test_max_plan_on_zoo_models_is_legal(name: str) -> None:
    graph = load_graph(
        build(name, weights="inputs", layers=2 if name != "resnet50" else None, scale=0.5)
    )
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target())
    partition = ctx.repair(ctx.edges, oracle.feasible)
    assert_legal_partition(ctx, partition)
    assert any(len(p) > 1 for p in partition)
    kinds = {g.kind for g in ctx.to_groups(partition)}
    assert "cube_epilogue" in kinds


def test_sharing_shrinks_bert_decision_variables_at_least_8_fold() -> None:
    graph = load_graph(build("bert-base", weights="inputs"))
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target())
    shared = SearchSpace(ctx, oracle).decision_vars
    unshared = SearchSpace(ctx, oracle, share=False).decision_vars
    assert unshared == len(ctx.edges) and unshared >= 8 * shared


def test_policy_levels_and_pattern_modes_shape_the_space() -> None:
    from search_space.rules import Policy, edges_of, match, rule_registry
    from search_space.space import build_space

    graph = load_graph(build("bert-base", weights="inputs", layers=2, scale=0.5))
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target(), ctx=ctx)
    spaces = {lvl: build_space(ctx, oracle, Policy(fusion_level=lvl)) for lvl in range(4)}
    assert spaces[0].decision_vars == 0 and not spaces[0].fixed
    assert spaces[1].decision_vars == 0 and spaces[1].fixed  # greedy groups, configs searched
    assert 0 < spaces[2].decision_vars <= spaces[3].decision_vars
    assert set(spaces[2].open) <= set(spaces[3].open) == set(ctx.edges)
    # `never` closes a rule's edges; `always` fixes them on
    rules = rule_registry(Policy()).rules("all")
    attention = set().union(
        *(edges_of(ctx, m.ops) for m in match(ctx, rules) if m.rule == "attention")
    )
    never = build_space(ctx, oracle, Policy(patterns={"attention": "never"}))
    always = build_space(ctx, oracle, Policy(patterns={"attention": "always"}))
    assert attention and not attention & set(never.open)
    assert attention <= always.fixed
    plan = always.plan([])
    assert any(g.kind == "attention" for g in plan.groups)
    # a benefit threshold only ever closes edges
    picky = build_space(ctx, oracle, Policy(benefit_threshold=0.5))
    assert set(picky.open) < set(spaces[3].open)
    assert not build_space(ctx, oracle, Policy(share_repeated=False)).share


def test_swap_moves_pair_classes_that_share_an_operator() -> None:
    """Every swap pair shares an operator; mobilenetv3's HardSwish between an expand
    convolution's epilogue and the depthwise convolution's prologue is one of them, and the
    exchange moves that HardSwish from the one group to the other."""
    from search_space.rules import Policy
    from search_space.space import build_space

    graph = load_graph(build("mobilenetv3", weights="inputs", scale=0.25))
    ctx = FusionContext(graph)
    space = build_space(ctx, CostOracle(graph, load_target(), ctx=ctx), Policy())
    key = {p: k for k, p in space.param_of.items()}  # parameter -> class key
    swaps = [(key[a], key[b]) for a, b in space.swap_moves()]
    assert swaps == sorted(set(swaps))

    def ops(name: str) -> set[str]:
        return {n for e in space.classes[name] for n in (e.src, e.dst)}

    assert all(a < b and ops(a) & ops(b) for a, b in swaps)
    act = "/features.7/HardSwish"
    pair = [
        (a, b)
        for a, b in swaps
        if act in ops(a) & ops(b)
        and {a.split(":")[0], b.split(":")[0]}
        == {"BatchNormalization>HardSwish", "HardSwish>Conv"}
    ]
    assert len(pair) == 1
    epi, pro = sorted(pair[0], key=lambda c: not c.startswith("BatchNormalization"))
    others = [e for c in space.classes if c not in pair[0] for e in space.classes[c]]

    def group_of(chosen: list) -> set[str]:
        plan = space.plan(chosen)
        return next(set(g.ops) for g in plan.groups if act in g.ops)

    before = group_of(others + space.classes[epi])
    after = group_of(others + space.classes[pro])
    assert "/features.7/expand.bn/BatchNormalization" in before
    assert "/features.7/depthwise.conv/Conv" in after


def test_block_moves_fuse_whole_patterns_and_the_first_saves_time() -> None:
    """The local search's block moves: switching one block's classes on (nothing else) repairs
    into a plan that fuses that pattern's every occurrence whole, and the top-ranked block,
    applied to the unfused plan, makes it cheaper under the ranking model."""
    from search_space.rules import Policy, edges_of, match, policy_rules
    from search_space.space import build_space, plan_cost

    graph = load_graph(build("llama3-8b", weights="inputs", layers=2, scale=0.25))
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target(), ctx=ctx)
    space = build_space(ctx, oracle, Policy())
    key = {p: k for k, p in space.param_of.items()}  # parameter -> class key
    moves = [tuple(key[p] for p in b) for b in space.block_moves()]
    assert moves and all(len(b) > 1 and set(b) <= set(space.classes) for b in moves)
    assert len(set(moves)) == len(moves)
    matches = match(ctx, policy_rules(Policy()))
    for block in moves:
        plan = space.plan([e for c in block for e in space.classes[c]])
        where = {n: g.ops for g in plan.groups for n in g.ops}
        occurrences = [
            m
            for m in matches
            if tuple(
                sorted({space.class_of[e] for e in edges_of(ctx, m.ops) if e in space.class_of})
            )
            == block
        ]
        assert occurrences, block
        for m in occurrences:  # every occurrence of the block ends up in one kernel
            first = next(iter(m.ops))
            assert all(where[n] == where[first] for n in m.ops), (block, sorted(m.ops))
    none = space.plan([])
    top = space.plan([e for c in moves[0] for e in space.classes[c]])
    assert plan_cost(top, oracle) < plan_cost(none, oracle)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.integers(0, 2**16), st.integers(0, 2**16))
def test_a_forbidden_signature_is_repaired_around_and_other_groups_are_kept(
    case, seed: int, pick: int
) -> None:
    model, _ = case
    graph = load_graph(model)
    ctx = FusionContext(graph, max_fused_ops=5)
    space = SearchSpace(ctx, CostOracle(graph, load_target()))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    trial = study.ask()
    before = space.suggest(trial)
    fused = [g for g in before.groups if len(g.ops) > 1]
    if not fused:
        return
    sig = fused[pick % len(fused)].signature(graph)
    banned = [set(g.ops) for g in fused if g.signature(graph) == sig]
    space.forbid({sig: "planted"})
    after = space.replay(trial.params)  # the trial ran before the signature was forbidden
    assert_legal_partition(
        ctx, [frozenset(n for n in g.ops if n in ctx.index) for g in after.groups]
    )
    assert all(g.signature(graph) != sig for g in after.groups if len(g.ops) > 1)
    # every other group is kept as it was; the forbidden ones are split into their ops
    apart = {g.ops for g in before.groups if not any(set(g.ops) & b for b in banned)}
    assert apart <= {g.ops for g in after.groups}
    alone = {g.ops for g in after.groups} - apart
    assert all(len([n for n in ops if n in ctx.index]) == 1 for ops in alone)


# -- the baselines (was tests/search_space/test_baselines.py) -----------------------------------
@pytest.mark.parametrize("name", [m.name for m in list_models()])
def test_optimal_beats_max_and_greedy_beats_none(name: str) -> None:
    graph = load_graph(build(name, weights="inputs", **SMALL.get(name, {"scale": 0.1})))
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target(), ctx=ctx)
    cost = {
        k: plan_cost(baseline_plan(k, ctx, oracle), oracle)
        for k in ("none", "greedy", "max", "optimal")
    }
    tol = 1e-6 * cost["none"]
    assert cost["optimal"] <= cost["max"] + tol, cost
    assert cost["optimal"] <= cost["greedy"] + tol, cost
    assert cost["greedy"] <= cost["none"] + tol, cost


# -- the optimum on a zoo model (was tests/search_space/test_optimal.py) ------------------------
def partition_cost(partition: Iterable[Group], cost: Callable[[Group], float]) -> float:
    return sum(cost(part) for part in partition)


@pytest.fixture(scope="module")
def bert_small() -> tuple[FusionContext, Callable[[Group], float], Callable[[Group], bool]]:
    graph = load_graph(build("bert-base", weights="inputs", scale=0.1))
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target())

    def cost(ops: Group) -> float:
        return oracle.best(ctx.to_groups([ops])[0])[1]

    def feasible(ops: Group) -> bool:
        return oracle.feasible(ctx.to_groups([ops])[0].ops)

    return ctx, cost, feasible


def test_optimal_beats_none_max_and_greedy_like_on_bert(bert_small) -> None:
    ctx, cost, feasible = bert_small
    max_plan = ctx.repair(ctx.edges, feasible)
    epilogues = ctx.repair([e for e in ctx.edges if e.kind == "epilogue"], feasible)
    none = [frozenset([n]) for n in ctx.nodes]
    res = optimal_partition(ctx, cost, feasible=feasible, extra_groups=[*max_plan, *epilogues])
    assert_legal_partition(ctx, res.partition)
    assert all(feasible(p) for p in res.partition if len(p) > 1)
    assert res.cost == pytest.approx(partition_cost(res.partition, cost))
    for plan in (max_plan, epilogues, none):
        assert res.cost <= partition_cost(plan, cost) + 1e-9
    assert res.cost < partition_cost(none, cost)
    assert res.candidates >= len(ctx.nodes)


def test_extra_groups_larger_than_max_ops_stay_candidates(bert_small) -> None:
    ctx, cost, feasible = bert_small
    max_plan = ctx.repair(ctx.edges, feasible)
    res = optimal_partition(ctx, cost, feasible=feasible, extra_groups=max_plan, max_ops=1)
    assert res.cost <= partition_cost(max_plan, cost) + 1e-9
    assert all(len(p) == 1 or p in max_plan for p in res.partition)


def test_extra_groups_may_name_views_but_must_be_legal(bert_small) -> None:
    ctx, cost, _ = bert_small
    with_views = [set(g.ops) for g in ctx.to_groups(ctx.repair(ctx.edges))]
    optimal_partition(ctx, cost, extra_groups=with_views, max_ops=1)
    with pytest.raises(GraphError, match="not legal"):
        optimal_partition(ctx, cost, extra_groups=[ctx.nodes[:2] + ctx.nodes[-1:]], max_ops=1)
    with pytest.raises(GraphError, match="unknown op 'nope'"):
        optimal_partition(ctx, cost, extra_groups=[{"nope"}], max_ops=1)


def test_unavailable_rather_than_a_guess(bert_small) -> None:
    ctx, cost, feasible = bert_small
    with pytest.raises(OptimalUnavailable, match="max_candidates=5"):
        optimal_partition(ctx, cost, feasible=feasible, max_candidates=5)
    with pytest.raises(OptimalUnavailable, match="time limit"):
        optimal_partition(ctx, cost, time_limit=0.0)
    assert issubclass(OptimalUnavailable, AutofusionError)


def test_its_limits_are_work_not_seconds(bert_small) -> None:
    """The groups it may examine (``EXAMINED_PER_CANDIDATE`` per candidate it may keep, even
    when none is kept) and the branch-and-bound nodes of a solve: past either it is
    unavailable, on any machine; one node more than it needs changes nothing."""
    ctx, cost, feasible = bert_small
    with pytest.raises(OptimalUnavailable, match="examined"):
        optimal_partition(ctx, cost, feasible=lambda ops: False, max_candidates=2)
    plain = optimal_partition(ctx, cost, feasible=feasible)
    with pytest.raises(OptimalUnavailable, match="not solved to optimality"):
        optimal_partition(ctx, cost, feasible=feasible, node_limit=0)
    bounded = optimal_partition(ctx, cost, feasible=feasible, node_limit=1)
    assert bounded.partition == plain.partition and bounded.cost == plain.cost


def test_a_singleton_without_a_finite_cost_is_unavailable(bert_small) -> None:
    ctx, _, _ = bert_small
    with pytest.raises(OptimalUnavailable, match="alone has cost inf"):
        optimal_partition(ctx, lambda ops: math.inf, max_ops=1)
