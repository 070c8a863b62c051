"""Legality and repair on random DAGs (hypothesis) and on exporters' graphs (the space and
the zoo's plans, which need the cost oracle, are tested in
tests/costmodel/test_search_space_costed.py)."""

from __future__ import annotations

import numpy as np
from conftest import make
from fusion_helpers import assert_legal_partition, random_dags
from hypothesis import HealthCheck, given, settings
from onnx import TensorProto as T
from onnx import helper

from search_space import load_graph
from search_space.fusion import FusionContext


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_repair_always_yields_a_legal_acyclic_partition(case) -> None:
    model, subset = case
    graph = load_graph(model)
    ctx = FusionContext(graph, no_fusion_ops=["Softmax"], max_fused_ops=5)
    chosen = [e for e, keep in zip(ctx.edges, subset, strict=False) if keep]
    assert_legal_partition(ctx, ctx.repair(chosen), forbidden=("Softmax",))
    assert_legal_partition(ctx, ctx.repair(ctx.edges), forbidden=("Softmax",))
    assert all(
        graph.op(n).op_type != "Mystery" for p in ctx.repair(ctx.edges) if len(p) > 1 for n in p
    )


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
