"""Fusion rules: the built-in table on real exports and the zoo, presets, conflicts, user rules,
bad patterns, near-miss reports, and greedy's partition invariants."""

from __future__ import annotations

import functools
import tomllib
from collections import Counter

import networkx as nx
import onnx
import pytest
from conftest import EXPORTS, f32, make
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper

from search_space import AutofusionError, load_graph
from search_space.fusion import FusionContext
from search_space.rules import (
    DEFAULT_RULES,
    Match,
    Rule,
    RuleConflict,
    RuleError,
    RuleRegistry,
    default_registry,
    edges_of,
    greedy,
    match,
    resolve,
    unmatched_report,
)
from search_space.rules.table import TABLE

TOKENS = {"input_ids": (2, 16), "attention_mask": (2, 16)}


def _shapes(name: str) -> dict[str, tuple[int, ...]]:
    if name.startswith(("bert", "gpt2", "llama")):
        return TOKENS
    if name.startswith("encoder_layer"):
        return {"x": (2, 8, 32)}
    return {"image": (2, 3, 32, 32)}


@functools.cache
def export_ctx(name: str) -> FusionContext:
    return FusionContext(load_graph(EXPORTS / name, input_shapes=_shapes(name)))


@functools.cache
def zoo_ctx(name: str, scale: float, layers: int | None = None) -> FusionContext:
    from autotune.zoo import build

    return FusionContext(load_graph(build(name, weights="inputs", scale=scale, layers=layers)))


ALL = default_registry().rules("all")


def applied_counts(ctx: FusionContext, rules=ALL) -> Counter[str]:
    return Counter(m.rule for m in greedy(ctx, rules)[1])


def types(ctx: FusionContext, ops) -> Counter[str]:
    return Counter(ctx.graph.op(n).op_type for n in ops)


def assert_valid_plan(ctx: FusionContext, parts: list[frozenset[str]]) -> None:
    """A partition of the kernel ops into legal groups whose contraction is acyclic."""
    flat = [n for p in parts for n in p]
    assert sorted(flat) == sorted(ctx.nodes) and len(flat) == len(set(flat))
    owner = {n: i for i, p in enumerate(parts) for n in p}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(parts)))
    for i, p in enumerate(parts):
        assert ctx.check(p).ok, ctx.check(p).reason
        dag.add_edges_from((i, owner[s]) for n in p for s in ctx.succ[n] if owner[s] != i)
    assert nx.is_directed_acyclic_graph(dag)


# -- the table -------------------------------------------------------------------------------
def test_builtin_table_is_well_formed() -> None:
    names = [row[0] for row in TABLE]
    prios = [row[1] for row in TABLE]
    assert len(set(names)) == len(names)
    assert len(set(prios)) == len(prios), "equal built-in priorities could conflict"
    required = {
        "attention", "swiglu", "add_layernorm", "add_layernorm_decomposed",
        "layernorm_decomposed", "add_rmsnorm", "rmsnorm", "rotary", "gelu_erf", "gelu_tanh",
        "matmul_bias_act", "matmul_bias", "gemm_act", "softmax_dropout", "qkv_projection",
        "gate_up_projection", "conv_bn_relu", "conv_bn_relu6", "conv_bn_silu",
        "conv_bn_hardswish",
    }  # fmt: skip
    assert required <= set(names)
    reg = default_registry()
    assert len(reg) == len(DEFAULT_RULES) == len(TABLE)
    assert {r.name for r in reg.rules("cnn")} >= {"conv_bn_relu", "gemm_act"}
    assert "attention" not in {r.name for r in reg.rules("cnn")}
    assert [r.priority for r in reg.rules("all")] == sorted(prios, reverse=True)


def test_unknown_preset_lists_the_available_ones() -> None:
    with pytest.raises(RuleError, match="unknown preset 'x'; available: all, cnn, transformer"):
        default_registry().rules("x")
    assert issubclass(RuleError, AutofusionError)


# -- real exports ----------------------------------------------------------------------------
EXPECTED = {
    "bert_legacy_op14.onnx": {
        "attention": 2, "matmul_bias_gelu_erf": 2, "add_layernorm_decomposed": 5,
        "qkv_projection": 2, "matmul_bias": 4,
    },
    "bert_dynamo.onnx": {
        "attention": 2, "add_layernorm": 5, "qkv_projection": 2, "matmul_bias_act": 2,
        "matmul_bias": 4,
    },
    "gpt2_legacy_op14.onnx": {
        "attention": 2, "matmul_bias_gelu_tanh": 2, "add_layernorm_decomposed": 5,
    },
    "gpt2_dynamo.onnx": {"attention": 2, "matmul_bias_gelu_tanh": 2, "add_layernorm": 5},
    "llama_legacy_op14.onnx": {
        "attention": 2, "swiglu": 2, "add_rmsnorm": 4, "rmsnorm": 1, "rotary": 4,
        "qkv_projection": 2,
    },
    "llama_dynamo.onnx": {
        "attention": 2, "swiglu": 2, "add_rmsnorm": 4, "rmsnorm": 1, "rotary": 4,
        "qkv_projection": 2,
    },
    "encoder_layer_legacy_op14.onnx": {
        "attention": 1, "add_layernorm_decomposed": 2, "matmul_bias_act": 1, "matmul_bias": 2,
    },
    "encoder_layer_dynamo.onnx": {
        "attention": 1, "add_layernorm": 2, "matmul_bias_act": 1, "matmul_bias": 2,
    },
    "resnet18_legacy_op14.onnx": {"conv_bn_add_relu": 8, "conv_bn_relu": 9},
    "resnet18_dynamo.onnx": {"conv_bn_add_relu": 8, "conv_bn_relu": 9},
    "mobilenetv2_legacy_op14.onnx": {"conv_bn_relu6": 35, "conv_bn_add": 11},
    "mobilenetv2_dynamo.onnx": {"conv_bn_relu6": 35, "conv_bn_add": 11},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_greedy_applies_the_expected_rules_on_real_exports(name: str) -> None:
    ctx = export_ctx(name)
    parts, applied = greedy(ctx, ALL)
    assert Counter(m.rule for m in applied) == EXPECTED[name]
    assert_valid_plan(ctx, parts)
    for m in applied:  # the tuner can open exactly these edges and connect the group
        g = nx.Graph()
        g.add_nodes_from(m.ops)
        g.add_edges_from((e.src, e.dst) for e in edges_of(ctx, m.ops))
        assert nx.is_connected(g), m.rule
        assert edges_of(ctx, m.ops) <= set(ctx.edges)


@pytest.mark.parametrize(
    ("name", "rules"),
    [
        ("bert_legacy_op14.onnx", {"layernorm_decomposed", "gelu_erf", "attention"}),
        ("gpt2_legacy_op14.onnx", {"gelu_tanh", "layernorm_decomposed"}),
        ("llama_dynamo.onnx", {"rmsnorm", "gate_up_projection", "matmul_bias_silu"}),
    ],
)
def test_the_smaller_patterns_match_inside_the_larger_ones(name: str, rules: set[str]) -> None:
    assert rules <= {m.rule for m in match(export_ctx(name), ALL)}


@pytest.mark.parametrize("name", ["llama_legacy_op14.onnx", "llama_dynamo.onnx"])
def test_llama_attention_takes_the_grouped_query_expands(name: str) -> None:
    ctx = export_ctx(name)
    att = [m for m in greedy(ctx, ALL)[1] if m.rule == "attention"]
    for m in att:
        got = types(ctx, m.ops)
        assert got["MatMul"] == 2 and got["Softmax"] == 1 and got["Expand"] == 2
        assert got["Mul"] == 2  # the SDPA scale applied to Q and K separately
        assert {g.kind for g in ctx.to_groups([m.ops])} == {"attention"}
    rope = [m for m in greedy(ctx, ALL)[1] if m.rule == "rotary"]
    assert all(types(ctx, m.ops) == Counter(Mul=2, Slice=2, Neg=1, Concat=1, Add=1) for m in rope)
    swiglu = [m for m in greedy(ctx, ALL)[1] if m.rule == "swiglu"]
    assert all(types(ctx, m.ops) == Counter(MatMul=2, Sigmoid=1, Mul=2) for m in swiglu)


def test_bert_attention_keeps_the_nan_guard_and_the_additive_mask() -> None:
    ctx = export_ctx("bert_legacy_op14.onnx")
    for m in (m for m in greedy(ctx, ALL)[1] if m.rule == "attention"):
        got = types(ctx, m.ops)
        assert got["IsNaN"] == 1 and got["Where"] == 1 and got["Add"] == 1
        assert got["Mul"] == 2


# -- zoo and presets -------------------------------------------------------------------------
ZOO = {
    ("resnet50", "cnn"): {"conv_bn_add_relu", "conv_bn_relu", "conv_bn"},
    ("resnet50", "transformer"): set(),
    ("mobilenetv3", "cnn"): {"conv_bn_hardswish", "conv_bn_relu", "conv_bn", "gemm_act"},
    ("mobilenetv3", "transformer"): {"gemm_act"},
    ("bert-base", "transformer"): {
        "attention", "matmul_bias_gelu_erf", "add_layernorm", "qkv_projection", "gemm_act",
        "matmul_bias",
    },
    ("bert-base", "cnn"): {"gemm_act"},
    ("gpt2", "transformer"): {
        "attention", "matmul_bias_gelu_tanh", "add_layernorm_decomposed", "matmul_bias",
    },
    ("llama3-8b", "transformer"): {
        "attention", "swiglu", "add_rmsnorm", "rmsnorm", "rotary", "qkv_projection",
    },
    ("llama3-8b", "cnn"): set(),
    ("vit-b16", "transformer"): {
        "attention", "matmul_bias_gelu_erf", "add_layernorm", "qkv_projection", "matmul_bias",
    },
    ("transformer-base", "transformer"): {
        "attention", "add_layernorm", "qkv_projection", "matmul_bias_act", "matmul_bias",
    },
}  # fmt: skip


@pytest.mark.parametrize(("model", "preset"), sorted(ZOO))
def test_greedy_applies_exactly_the_presets_rules_on_the_zoo(model: str, preset: str) -> None:
    ctx = zoo_ctx(model, 0.1, 2 if model != "resnet50" and model != "mobilenetv3" else None)
    reg = default_registry()
    parts, applied = greedy(ctx, reg.rules(preset))
    assert {m.rule for m in applied} == ZOO[model, preset]
    assert all(preset in reg.get(m.rule).presets for m in applied)
    assert_valid_plan(ctx, parts)


def test_llama_32_layers_fires_every_rule_once_per_layer() -> None:
    ctx = zoo_ctx("llama3-8b", 0.05, 32)
    got = applied_counts(ctx, default_registry().rules("transformer"))
    assert got == {
        "attention": 32, "swiglu": 32, "qkv_projection": 32, "rotary": 64, "add_rmsnorm": 64,
        "rmsnorm": 1,
    }  # fmt: skip


def test_se_gate_is_not_mistaken_for_hardswish() -> None:
    # MobileNetV3's squeeze-excite multiplies HardSigmoid(conv(pool)) by x: not x * hsig(x)
    ctx = zoo_ctx("mobilenetv3", 0.1)
    assert "conv_bn_hardswish_decomposed" not in {m.rule for m in match(ctx, ALL)}


# -- conflicts and resolution ----------------------------------------------------------------
GELU_ERF = next(r for r in DEFAULT_RULES if r.name == "gelu_erf")


def test_equal_priorities_on_the_same_ops_are_a_conflict() -> None:
    ctx = export_ctx("bert_legacy_op14.onnx")
    mine = Rule("my_gelu", GELU_ERF.priority, "Div[scalar] > Erf > Add > Mul > Mul")
    with pytest.raises(RuleConflict) as err:
        greedy(ctx, [GELU_ERF, mine])
    msg = str(err.value)
    assert f"rules 'gelu_erf' and 'my_gelu' (priority {GELU_ERF.priority}) both claim ops" in msg
    assert "give one a higher priority" in msg and "intermediate_act_fn/Erf" in msg


def test_the_higher_priority_wins() -> None:
    ctx = export_ctx("bert_legacy_op14.onnx")
    mine = Rule("my_gelu", GELU_ERF.priority + 1, "Div[scalar] > Erf > Add > Mul > Mul")
    assert applied_counts(ctx, [GELU_ERF, mine]) == {"my_gelu": 2}
    low = Rule("my_gelu", GELU_ERF.priority - 1, "Div[scalar] > Erf > Add > Mul > Mul")
    assert applied_counts(ctx, [GELU_ERF, low]) == {"gelu_erf": 2}


def test_resolve_prefers_priority_then_size_and_keeps_disjoint_matches() -> None:
    a = Match("a", 10, frozenset({"x", "y"}))
    b = Match("b", 20, frozenset({"y", "z"}))
    c = Match("a", 10, frozenset({"p", "q", "r"}))
    d = Match("a", 10, frozenset({"q"}))
    assert resolve([a, b, c, d]) == [b, c]
    same = Match("c", 20, frozenset({"z"}))
    with pytest.raises(RuleConflict, match="rules 'b' and 'c' \\(priority 20\\)"):
        resolve([b, same])


# -- user rules ------------------------------------------------------------------------------
def test_register_a_python_rule() -> None:
    reg = default_registry()
    reg.register(Rule("bias_gelu", 99, "Add[bias] > Gelu", presets=("transformer",)))
    got = applied_counts(export_ctx("bert_dynamo.onnx"), reg.rules("transformer"))
    assert got["bias_gelu"] == 2 and got["matmul_bias_act"] == 0
    with pytest.raises(RuleError, match="'bias_gelu' is already registered"):
        reg.register(Rule("bias_gelu", 1, "Add > Gelu"))
    assert "bias_gelu" not in default_registry()


def test_rules_from_a_toml_config() -> None:
    text = """
    [[rules]]
    name = "bias_gelu"
    priority = 99
    pattern = "Add[bias] > Gelu"
    presets = ["transformer"]

    [[rules]]
    name = "matmul_bias"
    priority = 98
    pattern = "MatMul|Gemm > Add[bias]"
    """
    entries = tomllib.loads(text)["rules"]
    reg = RuleRegistry.from_config(entries)
    assert reg.get("matmul_bias").priority == 98  # a config entry re-prioritises a built-in
    assert len(reg) == len(DEFAULT_RULES) + 1
    assert "bias_gelu" not in {r.name for r in reg.rules("cnn")}
    got = applied_counts(export_ctx("bert_dynamo.onnx"), reg.rules("transformer"))
    assert got["bias_gelu"] == 2 and got["matmul_bias"] == 10  # above qkv_projection now
    only = RuleRegistry.from_config(entries, defaults=False)
    assert [r.name for r in only] == ["bias_gelu", "matmul_bias"]
    rule = reg.get("bias_gelu")
    assert Rule.from_json(rule.to_json()) == rule


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"name": "a", "priority": 1, "pattern": "Add", "prio": 2}, "unknown key 'prio'"),
        ({"name": "a", "pattern": "Add"}, "missing key 'priority'"),
        ({"name": "a", "priority": "high", "pattern": "Add"}, "priority must be an int"),
        ({"name": "a", "priority": 1, "pattern": "Add", "presets": ["gpu"]}, "preset 'gpu'"),
        ({"name": "a", "priority": 1, "pattern": "Add", "kind": "tree"}, "unknown kind 'tree'"),
    ],
)
def test_bad_config_entries(entry: dict, problem: str) -> None:
    with pytest.raises(RuleError, match=problem):
        RuleRegistry.from_config([entry])


@pytest.mark.parametrize(
    ("pattern", "kind", "problem"),
    [
        ("", "chain", "the pattern is empty"),
        ("MatMul >> Add", "chain", "expected an op type, found '>' at column 9"),
        ("Matmul > Add", "chain", "unknown op type 'Matmul' \\(did you mean 'MatMul'\\?\\)"),
        ("MatMul > Add[biass]", "chain", "unknown predicate 'biass'; available: bias"),
        ("MatMul Add", "chain", "unexpected 'Add' \\('>' joins steps\\)"),
        ("MatMul > Add $", "chain", "unexpected character '\\$'"),
        ("MatMul > Add??", "chain", "unexpected '\\?'"),
        ("Reshape > Add", "chain", "the first step 'Reshape' is a view"),
        ("Softmax > Dropout|Relu", "chain", "mixes views"),
        ("MatMul > Add<(Mul<Add)", "chain", "cannot have side branches of its own"),
        ("Add > Relu", "siblings", "starts with a required MatMul\\|Gemm step"),
        ("(MatMul){1}", "siblings", "needs 2 <= n <= m, got \\{1\\}"),
        ("(MatMul > Add", "siblings", "expected '\\)', found the end"),
    ],
)
def test_bad_patterns_name_the_rule_and_the_problem(pattern: str, kind: str, problem: str) -> None:
    with pytest.raises(RuleError, match=f"rule 'mine': bad pattern .*{problem}"):
        Rule("mine", 1, pattern, kind=kind)


# -- unmatched report ------------------------------------------------------------------------
def _attention_with_head_mask() -> onnx.ModelProto:
    """HF eager attention exported with a head_mask: a Mul between Softmax and PV."""
    v = helper.make_tensor_value_info
    n = helper.make_node
    shape = [2, 2, 8, 8]
    nodes = [
        n("MatMul", ["q", "kt"], ["s0"], name="qk"),
        n("Div", ["s0", "sqrt_d"], ["s1"], name="scale"),
        n("Add", ["s1", "mask"], ["s2"], name="mask_add"),
        n("Softmax", ["s2"], ["p0"], name="softmax", axis=-1),
        n("Mul", ["p0", "head_mask"], ["p1"], name="head_mask_mul"),
        n("MatMul", ["p1", "v"], ["out"], name="pv"),
    ]
    inputs = [v(x, T.FLOAT, shape) for x in ("q", "kt", "v")]
    inputs += [v("mask", T.FLOAT, [2, 1, 1, 8]), v("head_mask", T.FLOAT, [1, 2, 1, 1])]
    return make(nodes, inputs, [v("out", T.FLOAT, shape)], [f32("sqrt_d", 8**0.5)])


def _layernorm_eps_after_sqrt() -> onnx.ModelProto:
    """A hand-written LayerNorm, (x - mean) / (std + eps): eps after the Sqrt."""
    v = helper.make_tensor_value_info
    n = helper.make_node
    nodes = [
        n("Add", ["x", "y"], ["r"], name="residual"),
        n("ReduceMean", ["r"], ["mu"], name="mean", axes=[-1]),
        n("Sub", ["r", "mu"], ["d"], name="centre"),
        n("Pow", ["d", "two"], ["d2"], name="square"),
        n("ReduceMean", ["d2"], ["var"], name="var", axes=[-1]),
        n("Sqrt", ["var"], ["std"], name="std"),
        n("Add", ["std", "eps"], ["den"], name="eps_add"),
        n("Div", ["d", "den"], ["out"], name="norm"),
    ]
    inputs = [v("x", T.FLOAT, [2, 8, 16]), v("y", T.FLOAT, [2, 8, 16])]
    inits = [f32("two", 2.0), f32("eps", 1e-5)]
    return make(nodes, inputs, [v("out", T.FLOAT, [2, 8, 16])], inits)


def test_report_explains_a_partial_attention_match() -> None:
    ctx = FusionContext(load_graph(_attention_with_head_mask()))
    assert "attention" not in {m.rule for m in match(ctx, ALL)}
    rep = [e for e in unmatched_report(ctx, ALL) if e["rule"] == "attention"]
    assert len(rep) == 1 and rep[0]["reason"] == "partial"
    assert rep[0]["detail"].startswith("matched MatMul > Div > Add > Softmax; step 10 'MatMul")
    assert rep[0]["detail"].endswith("found Mul")
    assert rep[0]["ops"] == ["qk", "scale", "mask_add", "softmax"]


def test_report_explains_a_layernorm_written_differently() -> None:
    ctx = FusionContext(load_graph(_layernorm_eps_after_sqrt()))
    rep = {e["rule"]: e for e in unmatched_report(ctx, ALL)}
    e = rep["add_layernorm_decomposed"]
    assert e["detail"] == (
        "matched Add > ReduceMean > Sub > Pow > ReduceMean; step 6 'Add[scalar]' found Sqrt"
    )


def test_report_explains_matches_the_policy_rejects() -> None:
    g = export_ctx("bert_legacy_op14.onnx").graph
    rep = unmatched_report(FusionContext(g, max_fused_ops=8), ALL)
    ln = [e for e in rep if e["rule"] == "add_layernorm_decomposed"]
    assert ln and ln[0]["reason"] == "illegal" and "max_fused_ops=8" in ln[0]["detail"]
    assert ln[0]["count"] == 5
    rep = unmatched_report(FusionContext(g, no_fusion_ops=["Softmax"]), ALL)
    att = [e for e in rep if e["rule"] == "attention"]
    assert att and "Softmax" in att[0]["detail"] and "never fuses" in att[0]["detail"]
    # nothing to explain on a model where everything expected fired
    assert unmatched_report(export_ctx("gpt2_dynamo.onnx"), ALL) == []


def test_report_explains_too_many_siblings() -> None:
    # every decoder layer projects the encoder memory to K and V: 4 siblings at 2 layers
    ctx = zoo_ctx("transformer-base", 0.1, 2)
    rep = [e for e in unmatched_report(ctx, ALL) if e["reason"] == "siblings"]
    assert {e["rule"] for e in rep} == {"qkv_projection", "gate_up_projection"}
    assert all(e["detail"].startswith("4 sibling matmuls share an input") for e in rep)


# -- pattern language details ----------------------------------------------------------------
def test_view_steps_and_casts_around_softmax() -> None:
    v = helper.make_tensor_value_info
    n = helper.make_node
    nodes = [
        n("Cast", ["s"], ["s32"], name="up", to=T.FLOAT),
        n("Softmax", ["s32"], ["p32"], name="softmax", axis=-1),
        n("Cast", ["p32"], ["p"], name="down", to=T.FLOAT16),
        n("Dropout", ["p"], ["pd"], name="dropout"),
        n("MatMul", ["pd", "v"], ["out"], name="pv"),
    ]
    shape = [2, 2, 8, 8]
    model = make(
        nodes,
        [v("s", T.FLOAT16, shape), v("v", T.FLOAT16, shape)],
        [v("out", T.FLOAT16, shape)],
    )
    ctx = FusionContext(load_graph(model))
    got = [m for m in match(ctx, ALL) if m.rule == "softmax_dropout"]
    assert [sorted(m.ops) for m in got] == [["down", "softmax", "up"]]
    assert "softmax_dropout" in applied_counts(ctx)


def test_conv_bn_silu_needs_the_mul_to_read_the_activation_it_gates() -> None:
    v = helper.make_tensor_value_info
    n = helper.make_node
    c = 16
    nodes = [
        n("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["y", "g", "b", "m", "var"], ["z"], name="bn"),
        n("Sigmoid", ["z"], ["s"], name="sig"),
        n("Mul", ["z", "s"], ["out"], name="silu"),
    ]
    inits = [f32("w", [[[[0.1] * 3] * 3] * c] * c)]
    inits += [f32(k, [1.0] * c) for k in ("g", "b", "m", "var")]
    out = [v("out", T.FLOAT, [1, c, 8, 8])]
    ctx = FusionContext(load_graph(make(nodes, [v("x", T.FLOAT, [1, c, 8, 8])], out, inits)))
    assert applied_counts(ctx) == {"conv_bn_silu": 1}
    assert greedy(ctx, ALL)[0] == [frozenset({"conv", "bn", "sig", "silu"})]


def test_feasibility_callback_lets_smaller_rules_through() -> None:
    ctx = export_ctx("llama_dynamo.onnx")
    parts, applied = greedy(ctx, ALL, feasible=lambda ops: len(ops) <= 7)
    got = Counter(m.rule for m in applied)
    assert got["add_rmsnorm"] == 0 and got["rmsnorm"] == 5 and got["attention"] == 0
    assert all(len(m.ops) <= 7 for m in applied)
    assert_valid_plan(ctx, parts)


# -- property: greedy is a legal, acyclic partition for any rule set -------------------------
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["bert_legacy_op14.onnx", "llama_dynamo.onnx", "mobilenetv2_dynamo.onnx"]),
    st.permutations(range(len(DEFAULT_RULES))),
    st.sets(st.integers(0, len(DEFAULT_RULES) - 1), min_size=1),
)
def test_greedy_is_a_partition_under_any_priorities(name, prios, chosen) -> None:
    ctx = export_ctx(name)
    rules = [
        Rule(r.name, prios[i], r.pattern, r.presets, r.kind)
        for i, r in enumerate(DEFAULT_RULES)
        if i in chosen
    ]
    parts, applied = greedy(ctx, rules)
    assert_valid_plan(ctx, parts)
    multi = {p for p in parts if len(p) > 1}
    assert multi == {m.ops for m in applied}


def test_greedy_never_contracts_two_groups_into_a_cycle() -> None:
    # {relu, add} and {exp, sig, mul} are each convex, but relu -> exp and sig -> add would
    # make the two kernels wait for each other
    v = helper.make_tensor_value_info
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["a"], name="relu"),
        n("Sigmoid", ["y"], ["c"], name="sig"),
        n("Add", ["a", "c"], ["d"], name="add"),
        n("Exp", ["a"], ["b"], name="exp"),
        n("Mul", ["b", "c"], ["e"], name="mul"),
    ]
    shape = [4, 16]
    model = make(
        nodes,
        [v("x", T.FLOAT, shape), v("y", T.FLOAT, shape)],
        [v("d", T.FLOAT, shape), v("e", T.FLOAT, shape)],
    )
    ctx = FusionContext(load_graph(model))
    first, second = Rule("relu_add", 2, "Relu > Add"), Rule("exp_mul", 1, "Exp > Mul<Sigmoid")
    assert ctx.check({"exp", "sig", "mul"}).ok and ctx.check({"relu", "add"}).ok
    parts, applied = greedy(ctx, [first, second])
    assert [m.rule for m in applied] == ["relu_add"]
    assert_valid_plan(ctx, parts)
    assert [m.rule for m in greedy(ctx, [second])[1]] == ["exp_mul"]
