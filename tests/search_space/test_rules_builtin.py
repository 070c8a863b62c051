"""The built-in rule table, on the real exports and on the zoo under each preset."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest
from rules_helpers import ALL, applied_counts, assert_valid_plan, export_ctx, types, zoo_ctx

from search_space import AutofusionError
from search_space.rules import DEFAULT_RULES, RuleError, default_registry, edges_of, greedy, match
from search_space.rules.table import TABLE


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


@pytest.mark.parametrize("model", ["llama3-8b", "llama3-8b-decode"])
def test_zoo_llama_attention_takes_both_expands(model: str) -> None:
    """HF's eager Llama: K is repeated (Expand), then transposed, and only the scores are
    scaled, so Q's side ``Transpose?`` could take K's Transpose and leave K's Expand out
    when the sides are matched in one order only."""
    ctx = zoo_ctx(model, 0.25, 1)
    att = [m for m in greedy(ctx, ALL)[1] if m.rule == "attention"]
    assert len(att) == 1
    got = types(ctx, att[0].ops)
    assert got["Expand"] == 2 and got["MatMul"] == 2 and got["Softmax"] == 1


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
