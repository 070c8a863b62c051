"""The unmatched-rule report: partial matches, illegal matches, too many siblings."""

from __future__ import annotations

import onnx
from conftest import f32, make
from onnx import TensorProto as T
from onnx import helper
from rules_helpers import ALL, export_ctx, zoo_ctx

from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import match, unmatched_report


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
