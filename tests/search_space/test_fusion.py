"""Legality and repair on random DAGs (hypothesis) and on the zoo; the space replays plans."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import optuna
import pytest
from conftest import make
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper

from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.space import SearchSpace
from search_space.zoo import build

D = 64
KINDS = [
    "MatMul",
    "Add",
    "Relu",
    "Softmax",
    "LayerNormalization",
    "Mul",
    "Opaque",
    "Reshape",
    "Sigmoid",
    "ReduceMean",
]


@st.composite
def random_dags(draw):
    n = draw(st.integers(3, 12))
    tensors = ["x"]
    nodes, weights, value_info = [], [], []
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        a = draw(st.sampled_from(tensors))
        out = f"t{i}"
        name = f"op{i}"
        if kind == "MatMul":
            w = f"w{i}"
            weights.append(helper.make_tensor_value_info(w, T.FLOAT, [D, D]))
            nodes.append(helper.make_node("MatMul", [a, w], [out], name=name))
        elif kind in ("Add", "Mul"):
            b = draw(st.sampled_from(tensors))
            nodes.append(helper.make_node(kind, [a, b], [out], name=name))
        elif kind == "LayerNormalization":
            g = f"g{i}"
            weights.append(helper.make_tensor_value_info(g, T.FLOAT, [D]))
            nodes.append(helper.make_node(kind, [a, g], [out], name=name, axis=-1))
        elif kind == "Softmax":
            nodes.append(helper.make_node(kind, [a], [out], name=name, axis=-1))
        elif kind == "ReduceMean":
            nodes.append(helper.make_node(kind, [a], [f"r{i}"], name=name, axes=[-1], keepdims=1))
            nodes.append(helper.make_node("Add", [a, f"r{i}"], [out], name=f"{name}_b"))
        elif kind == "Reshape":
            nodes.append(helper.make_node(kind, [a, "shape"], [out], name=name))
        elif kind == "Opaque":
            nodes.append(helper.make_node("Mystery", [a], [out], name=name, domain="x.y"))
            value_info.append(helper.make_tensor_value_info(out, T.FLOAT, [32, D]))
        else:
            nodes.append(helper.make_node(kind, [a], [out], name=name))
        tensors.append(out)
    used = {t for node in nodes for t in node.input}
    outs = [
        helper.make_tensor_value_info(t, T.FLOAT, [32, D]) for t in tensors[1:] if t not in used
    ] or [helper.make_tensor_value_info(tensors[-1], T.FLOAT, [32, D])]
    inits = [
        helper.make_tensor("axes", T.INT64, [1], [-1]),
        helper.make_tensor("shape", T.INT64, [2], [32, D]),
    ]
    model = make(
        nodes, [helper.make_tensor_value_info("x", T.FLOAT, [32, D]), *weights], outs, inits
    )
    model.opset_import.append(helper.make_opsetid("x.y", 1))
    model.graph.value_info.extend(value_info)
    entry = model.metadata_props.add()
    entry.key, entry.value = "ai.autofusion.weight_inputs", json.dumps([w.name for w in weights])
    subset = draw(st.lists(st.booleans(), min_size=64, max_size=64))
    return model, subset


def _assert_legal_partition(ctx: FusionContext, partition, forbidden=()) -> None:
    flat = [n for p in partition for n in p]
    assert sorted(flat) == sorted(ctx.nodes)  # a partition: every kernel op exactly once
    where = {n: i for i, p in enumerate(partition) for n in p}
    for p in partition:
        assert ctx.check(p).ok, (sorted(p), ctx.check(p).reason)
        assert ctx.is_convex(p)
        if len(p) > 1:
            assert not any(ctx.graph.op(n).op_type in forbidden for n in p)
    contracted = nx.DiGraph()
    contracted.add_nodes_from(range(len(partition)))
    for n in ctx.nodes:
        for m in ctx.succ[n]:
            if where[n] != where[m]:
                contracted.add_edge(where[n], where[m])
    assert nx.is_directed_acyclic_graph(contracted)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_repair_always_yields_a_legal_acyclic_partition(case) -> None:
    model, subset = case
    graph = load_graph(model)
    ctx = FusionContext(graph, no_fusion_ops=["Softmax"], max_fused_ops=5)
    chosen = [e for e, keep in zip(ctx.edges, subset, strict=False) if keep]
    _assert_legal_partition(ctx, ctx.repair(chosen), forbidden=("Softmax",))
    _assert_legal_partition(ctx, ctx.repair(ctx.edges), forbidden=("Softmax",))
    assert all(
        graph.op(n).op_type != "Mystery" for p in ctx.repair(ctx.edges) if len(p) > 1 for n in p
    )


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
    _assert_legal_partition(ctx, partition)
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


def test_attention_and_horizontal_templates_are_legal_only_in_shape() -> None:
    from conftest import exporter_attention

    graph = load_graph(exporter_attention(), input_shapes={"x": (2, 8, 16)})
    ctx = FusionContext(graph)
    assert ctx.check({"qk", "scale", "add_mask", "softmax", "isnan", "nan_guard", "pv"}).ok
    assert not ctx.check({"qk", "scale", "pv"}).ok  # two matmuls without a softmax between
    assert ctx.check({"q_proj", "k_proj"}).ok  # siblings reading x with weight operands
    assert not ctx.check({"q_proj", "o_proj"}).ok
    verdict = ctx.check({"softmax", "nan_guard"})  # softmax -> isnan -> nan_guard leaves it
    assert not verdict.ok and "convex" in verdict.reason
    assert np.isfinite(len(ctx.edges))


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


def test_argmax_defaults_to_axis_0_so_it_is_not_a_row_reduction() -> None:
    n = helper.make_node
    vi = helper.make_tensor_value_info
    nodes = [
        n("Relu", ["x"], ["r"], name="relu"),
        n("ArgMax", ["r"], ["i"], name="argmax", keepdims=1),
        n("ArgMax", ["r"], ["j"], name="argmax_last", axis=-1, keepdims=1),
    ]
    model = make(
        nodes, [vi("x", T.FLOAT, [64, 8])], [vi("i", T.INT64, [1, 8]), vi("j", T.INT64, [64, 1])]
    )
    ctx = FusionContext(load_graph(model))
    assert not ctx.check({"relu", "argmax"}).ok
    assert ctx.check({"relu", "argmax_last"}).ok


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
    _assert_legal_partition(
        ctx, [frozenset(n for n in g.ops if n in ctx.index) for g in after.groups]
    )
    assert all(g.signature(graph) != sig for g in after.groups if len(g.ops) > 1)
    # every other group is kept as it was; the forbidden ones are split into their ops
    apart = {g.ops for g in before.groups if not any(set(g.ops) & b for b in banned)}
    assert apart <= {g.ops for g in after.groups}
    alone = {g.ops for g in after.groups} - apart
    assert all(len([n for n in ops if n in ctx.index]) == 1 for ops in alone)
