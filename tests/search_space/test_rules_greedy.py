"""Pattern details on small graphs and greedy's partition invariants under any rule set."""

from __future__ import annotations

from collections import Counter

from conftest import f32, make
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper
from rules_helpers import ALL, applied_counts, assert_valid_plan, export_ctx

from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import DEFAULT_RULES, Rule, greedy, match


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
