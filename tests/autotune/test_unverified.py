"""No unverified kernel passes silently (issue 22): a kernel no check can run on is kept fused
but counted, and unfused under ``strict_safety``."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import search_space
from autotune.tuner import make_safety
from autotune.verify import ModelSource, Status, extract_group, safe_groups, verify_kernels
from autotune.verify.shrink import plan_shrinks
from costmodel.lower import Lowering
from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space.fusion import FusionContext
from search_space.ir import make_group
from search_space.rules import Policy
from search_space.space import PlanGroup, SpacePlan, baseline_plan
from search_space.zoo import build


def _too_large_to_check() -> tuple[onnx.ModelProto, search_space.Graph]:
    """A Mul + ReduceSum over the only axis it could shrink, too large to run whole."""
    n = helper.make_node
    model = helper.make_model(
        helper.make_graph(
            [
                n("Mul", ["x", "two"], ["y"], name="mul"),
                n("ReduceSum", ["y", "axes"], ["z"], name="sum", keepdims=1),
            ],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5000, 1000])],
            [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 1000])],
            [
                numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                numpy_helper.from_array(np.array([0], np.int64), "axes"),
            ],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    return model, search_space.load_graph(model)


def test_a_group_that_cannot_shrink_and_is_large_is_unverified_and_counted() -> None:
    model, graph = _too_large_to_check()
    group = PlanGroup(("mul", "sum"), "row_reduce")
    [v] = verify_kernels(model, graph, [group], load_target(), Policy())
    assert v.verdict == "unverified: not shrinkable and too large to run whole"
    assert v.status is Status.UNVERIFIED and v.ok and math.isnan(v.cosine)
    assert v.to_json()["status"] == "unverified"
    kept, counts = safe_groups([group], [v])  # kept fused, and counted
    assert [g.ops for g in kept] == [group.ops] and counts["unverified"] == 1
    kept, counts = safe_groups([group], [v], strict=True)
    assert [g.ops for g in kept] == [("mul",), ("sum",)] and counts["skipped_unverified"] == 1


def test_strict_safety_unfuses_what_the_tuner_could_not_verify() -> None:
    model, graph = _too_large_to_check()
    target = load_target()
    fused = make_group(graph, ["mul", "sum"], "row_reduce")
    plan = SpacePlan((fused,), (Lowering(graph, target).default(fused),))
    lenient = make_safety(graph, model, None, Policy(), target)
    strict = make_safety(graph, model, None, Policy(strict_safety=True), target)
    checked = lenient(plan)
    same, counts = checked.plan, checked.counts
    assert same == plan and counts["unverified"] == 1 and not checked.failed
    checked = strict(plan)
    split, counts, verdicts = checked.plan, checked.counts, checked.verdicts
    assert [g.ops for g in split.groups] == [("mul",), ("sum",)]
    assert counts["skipped_unverified"] == 1 and counts["fused"] == 0
    assert list(checked.failed) == [fused.signature(graph)]  # the study forbids it
    assert all(v.startswith("unfused: unverified") for v in verdicts.values())


def _conv_block(stride: int) -> onnx.ModelProto:
    """Conv (3x3, the given stride) + BatchNorm + Relu on one large image."""
    rng = np.random.default_rng(0)
    n = helper.make_node

    def w(name: str, *shape: int, scale: float = 0.1) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    out = 112 // stride
    return helper.make_model(
        helper.make_graph(
            [
                n(
                    "Conv",
                    ["x", "w1"],
                    ["c"],
                    name="conv",
                    pads=[1, 1, 1, 1],
                    strides=[stride] * 2,
                ),
                n("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"], name="bn"),
                n("Relu", ["bn"], ["y"], name="relu"),
            ],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 112, 112])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, out, out])],
            [
                w("w1", 128, 64, 3, 3),
                numpy_helper.from_array(np.ones(128, np.float32), "g"),
                numpy_helper.from_array(np.zeros(128, np.float32), "b"),
                numpy_helper.from_array(np.zeros(128, np.float32), "m"),
                numpy_helper.from_array(np.ones(128, np.float32), "v"),
            ],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )


@pytest.mark.parametrize("stride", [1, 2])
def test_a_batch_one_convolution_block_is_verified_on_a_crop_of_its_image(stride: int) -> None:
    model = _conv_block(stride)
    graph = search_space.load_graph(model)
    group = make_group(graph, ["conv", "bn", "relu"], "cube_epilogue")
    sub = extract_group(ModelSource(model, graph), group)
    assert sub.rows < sub.full_rows and "axis 2" in sub.note
    # a crop: the batch and every channel stay, every weight whole (each output still sums
    # 64 channels x 3 x 3), fewer image rows, an output that is whole rows of the stride
    assert sub.shapes["x"][:2] == (1, 64) and sub.shapes["x"][2] < 112
    assert sub.consts["w1"].shape == (128, 64, 3, 3)
    assert sub.shapes["y"][2] * stride == sub.shapes["x"][2]
    [v] = verify_kernels(model, graph, [PlanGroup(group.ops, group.kind)], load_target(), Policy())
    assert v.status is Status.PASSED and v.rows == sub.rows < v.full_rows


# -- a decode step's attention with its in-place cache update ----------------------------------
@pytest.mark.parametrize("batch", [1, 2])
def test_a_decode_attention_that_updates_its_cache_is_verified_on_a_crop(batch: int) -> None:
    """The max plan fuses the cache update (ScatterND into the caller's buffer), the
    grouped-query Expand and the attention: larger than the rows a check runs on, it is
    cropped (batch 1: to one KV head and its query heads; batch 2: also a batch row), the
    cache slots' indices cut with it, and passes against the float64 reference."""
    model = build(
        "llama3-8b-decode", weights="random", scale=0.25, layers=1, batch=batch, cache_len=1024
    )
    graph = search_space.load_graph(model)
    ctx = FusionContext(graph)
    plan = baseline_plan("max", ctx, CostOracle(graph, load_target(), ctx=ctx))
    [(group, config)] = [
        (g, c)
        for g, c in zip(plan.groups, plan.configs, strict=True)
        if {"ScatterND", "Expand", "Softmax"} <= {graph.op(n).op_type for n in g.ops}
    ]
    [v] = verify_kernels(
        model, graph, [PlanGroup(group.ops, group.kind, config)], load_target(), Policy()
    )
    assert v.status is Status.PASSED and v.rows < v.full_rows, v
    sub = extract_group(ModelSource(model, graph), group, rows=64)
    slots = [x for t, x in sub.consts.items() if t.startswith("cache_slot")]
    caches = [x for t, x in sub.feeds.items() if t.startswith("past_key_values")]
    assert slots and caches
    for index in slots:  # every kept slot lies inside the kept cache
        assert (index.reshape(-1, 3) < np.array(caches[0].shape[:3])).all()


def _scatter(order: str) -> tuple[onnx.ModelProto, search_space.Graph]:
    """new [4, 8] rows written into cache [4, 64, 8] at slot 63, row b into batch b
    (``order="same"``) or into batch 3 - b (``"reversed"``), then the cache scaled by 2."""
    n = helper.make_node
    b = np.arange(4) if order == "same" else np.arange(4)[::-1]
    idx = np.stack([b, np.full(4, 63)], axis=-1).astype(np.int64)
    model = helper.make_model(
        helper.make_graph(
            [
                n("ScatterND", ["cache", "idx", "new"], ["all"], name="update"),
                n("Mul", ["all", "two"], ["out"], name="mul"),
            ],
            "g",
            [
                helper.make_tensor_value_info("cache", TensorProto.FLOAT, [4, 64, 8]),
                helper.make_tensor_value_info("new", TensorProto.FLOAT, [4, 8]),
            ],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 64, 8])],
            [
                numpy_helper.from_array(idx, "idx"),
                numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            ],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    return model, search_space.load_graph(model)


def test_a_scatter_is_cropped_only_where_its_indices_stay_inside_the_kept_rows() -> None:
    """Rows b written into batch b crop to the first batches; rows written into batch 3 - b
    would write outside a crop, so that axis is refused with the reason."""
    for order, crops in (("same", True), ("reversed", False)):
        model, graph = _scatter(order)
        group = make_group(graph, ["update", "mul"])
        needed, found, reasons = plan_shrinks(graph, group, 64)
        batch = [s for s in found if s.note.startswith("batch ")]
        assert needed and bool(batch) is crops, (order, reasons)
        if not crops:
            assert any("indices past the kept rows" in r for r in reasons)
        [v] = verify_kernels(
            model, graph, [PlanGroup(group.ops, group.kind)], load_target(), Policy()
        )
        assert v.status is Status.PASSED and (v.rows < v.full_rows) is crops


# -- a KV cache's new row projected, split into heads and appended ------------------------------
def _project_and_append() -> tuple[onnx.ModelProto, search_space.Graph]:
    """k = x @ Wk (4 heads x 8 in its features), split into heads, appended to the past
    [1, 4, 16, 8] along the sequence (HF's concat cache); the whole chain one group."""
    n, vi = helper.make_node, helper.make_tensor_value_info
    rng = np.random.default_rng(0)
    model = helper.make_model(
        helper.make_graph(
            [
                n("MatMul", ["x", "wk"], ["k"], name="k_proj"),
                n("Reshape", ["k", "heads"], ["k4"], name="split"),
                n("Transpose", ["k4"], ["kt"], name="t", perm=[0, 2, 1, 3]),
                n("Concat", ["past", "kt"], ["present"], name="append", axis=2),
            ],
            "g",
            [vi("x", TensorProto.FLOAT, [1, 1, 64]), vi("past", TensorProto.FLOAT, [1, 4, 16, 8])],
            [vi("present", TensorProto.FLOAT, [1, 4, 17, 8])],
            [
                numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "wk"),
                numpy_helper.from_array(np.array([1, 1, 4, 8], np.int64), "heads"),
            ],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    return model, search_space.load_graph(model)


def test_a_projection_appended_to_its_cache_is_cropped_to_one_head_exactly() -> None:
    """The head axis of the cache is born in the projection's output features: the crop
    keeps one head by cutting the weight's columns, and its output is the full chain's first
    head, computed by onnxruntime on the whole model (the other heads' past drawn apart); the
    crop runs on onnx.reference, as safe mode runs it."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    model, graph = _project_and_append()
    group = make_group(graph, [op.name for op in graph.ops])
    source = ModelSource(model, graph)
    sub = extract_group(source, group, rows=16)
    assert "heads in the features" in sub.note and sub.rows < sub.full_rows
    assert sub.shapes["present"] == (1, 1, 17, 8)
    (cropped,) = ReferenceEvaluator(sub.model()).run(None, sub.run_feeds())
    past = np.random.default_rng(1).standard_normal((1, 4, 16, 8)).astype(np.float32)
    past[:, :1] = sub.feeds["past"]
    (full,) = ort.InferenceSession(model.SerializeToString()).run(
        None, {"x": sub.feeds["x"], "past": past}
    )
    np.testing.assert_allclose(cropped, full[:, :1], rtol=1e-6, atol=1e-6)


def test_the_concat_caches_projection_kernel_is_verified_on_a_crop() -> None:
    """HF's concat cache: K's projection, rotary and Concat with the past as one kernel (what
    a study proposes) crops to one KV head and passes. At full size it had no crop and was
    unverified, too large to run whole; at this quarter scale it ran whole."""
    model = build(
        "llama3-8b-decode", weights="random", scale=0.25, layers=1, cache_len=1024,
        cache_form="concat",
    )  # fmt: skip
    graph = search_space.load_graph(model)
    k_path = ("k_proj/MatMul", "Reshape_1", "Transpose_1", "Slice_2", "Slice_3", "Neg_1",
              "Concat_1", "Mul_2", "Mul_3", "Add_1", "Concat_2")  # fmt: skip
    group = make_group(graph, [f"/layers.0/self_attn/{op}" for op in k_path])
    [v] = verify_kernels(model, graph, [PlanGroup(group.ops, group.kind)], load_target(), Policy())
    assert v.status is Status.PASSED and v.rows < v.full_rows, v


# -- grouped-query attention fused with V's append to the concat cache --------------------------
def test_a_grouped_query_attention_with_its_v_append_crops_whole_kv_groups() -> None:
    """HF's concat cache: V's Concat with the past, the grouped-query Expand and the attention
    as one kernel (a study proposes it). The crop keeps whole KV groups: the KV heads and
    the query heads that read them shrink together (2 -> 1 and 8 -> 4 here), and the cropped
    kernel's output is the whole attention's first four query heads, computed in float64
    numpy (softmax(Q K^T s) repeat_kv(concat(past, v))) with the other heads drawn apart.
    Before, the KV heads kept all their rows against one query head and the full-size kernel
    was unverified, too large to run whole."""
    from onnx.reference import ReferenceEvaluator

    model = build(
        "llama3-8b-decode", weights="random", scale=0.25, layers=1, cache_len=1024,
        cache_form="concat",
    )  # fmt: skip
    graph = search_space.load_graph(model)
    path = ("Concat_3", "Unsqueeze_1", "Expand_1", "Reshape_4", "MatMul", "Mul_4", "Softmax",
            "MatMul_1")  # fmt: skip
    group = make_group(graph, [f"/layers.0/self_attn/{op}" for op in path])
    sub = extract_group(ModelSource(model, graph), group, rows=64)
    assert sub.rows < sub.full_rows, sub.note
    q, kt = "/layers.0/self_attn/Add_output_0", "/layers.0/self_attn/Transpose_3_output_0"
    past, new = "past_key_values.0.value", "/layers.0/self_attn/Transpose_2_output_0"
    full_shapes = {t: graph.tensors[t].static_shape for t in (q, kt, past, new)}
    kv, heads = full_shapes[past][1], full_shapes[q][1]
    assert sub.shapes[past][1] * heads == sub.shapes[q][1] * kv  # whole KV groups kept
    assert sub.shapes[past][1] < kv
    rng = np.random.default_rng(2)
    x = {}
    for t, shape in full_shapes.items():
        x[t] = rng.standard_normal(shape)
        x[t][:, : sub.shapes[t][1]] = sub.feeds[t]
    [scale] = [
        numpy_helper.to_array(i) for i in model.graph.initializer if i.name == "const.0.0883883"
    ]
    v = np.repeat(np.concatenate([x[past], x[new]], axis=2), heads // kv, axis=1)
    s = x[q] @ x[kt] * float(scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    names = [o.name for o in sub.model().graph.output]
    got = dict(zip(names, ReferenceEvaluator(sub.model()).run(None, sub.run_feeds()), strict=True))
    kept = sub.shapes[q][1]
    out = got["/layers.0/self_attn/MatMul_1_output_0"]
    np.testing.assert_allclose(out, want[:, :kept], rtol=1e-4, atol=1e-5)
    [verdict] = verify_kernels(
        model, graph, [PlanGroup(group.ops, group.kind)], load_target(), Policy()
    )
    assert verdict.status is Status.PASSED and verdict.rows < verdict.full_rows, verdict


def test_a_small_axis_that_divides_the_rows_does_not_shrink_with_them() -> None:
    """Only a grouped-query crop shrinks an input's axis that divides the rows: here a
    2-row activation operand (a dynamic weight) against 64 rows keeps its 2 rows, and the
    group is cropped to 8 of its 64 rows with the Concat's other input, as before the KV-group
    crop (which, tracking every divisor, had left it uncroppable)."""
    n, vi = helper.make_node, helper.make_tensor_value_info
    model = helper.make_model(
        helper.make_graph(
            [
                n("Transpose", ["w"], ["wt"], name="t", perm=[0, 2, 1]),
                n("MatMul", ["x", "wt"], ["m"], name="mm"),
                n("Concat", ["m", "z"], ["y"], name="c", axis=2),
            ],
            "g",
            [
                vi("x", TensorProto.FLOAT, [1, 64, 32]),
                vi("z", TensorProto.FLOAT, [1, 64, 16]),
                vi("w", TensorProto.FLOAT, [1, 2, 32]),
            ],
            [vi("y", TensorProto.FLOAT, [1, 64, 18])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    graph = search_space.load_graph(onnx.shape_inference.infer_shapes(model))
    group = make_group(graph, ["t", "mm", "c"])
    sub = extract_group(ModelSource(model, graph), group, rows=8)
    assert sub.rows == 8 < sub.full_rows == 64, sub.note
    assert sub.shapes["x"] == (1, 8, 32) and sub.shapes["z"] == (1, 8, 16)
    assert sub.shapes["w"] == (1, 2, 32)
