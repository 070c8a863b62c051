"""Kernel numerics (docs/verification.md level 2): zoo kernels pass, a planted bad fusion is caught
and unfused, the emulation rounds where the hardware does, and checks run once per signature on few
rows."""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import search_space
from autotune.verify import (
    KernelVerdict,
    ModelSource,
    Numerics,
    Status,
    compare,
    extract,
    extract_group,
    flash_attention,
    kernel_roles,
    numerics_for,
    online_softmax,
    safe_groups,
    split_k_matmul,
    verify_group,
    verify_kernels,
)
from autotune.verify.numerics import numerics_key
from costmodel.oracle import CostOracle
from costmodel.spec import Target, load_target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph, KernelConfig, make_group
from search_space.rules import Policy
from search_space.space import PlanGroup, baseline_plan
from search_space.zoo import build

NAMES = [
    "bert-base",
    "gpt2",
    "llama3-8b",
    "mobilenetv3",
    "resnet50",
    "transformer-base",
    "vit-b16",
]
FP32 = Numerics("fp32", "fp32", "fp32", "fp32", "fp32")
FLOAT_MIN = float(np.finfo(np.float32).min)


@functools.cache
def target(precision: str = "auto") -> Target:
    return load_target(precision=precision)


@functools.cache
def setup(name: str, weights: str = "random", **kw: int) -> tuple[Any, ...]:
    model = build(name, scale=0.1, weights=weights, **kw)
    graph = search_space.load_graph(model)
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, target(), ctx=ctx)
    plan = baseline_plan("max", ctx, oracle)
    groups = [PlanGroup(g.ops, g.kind, c) for g, c in zip(plan.groups, plan.configs, strict=True)]
    return model, graph, ctx, oracle, groups


def multi_op(graph: Graph, groups: list[PlanGroup]) -> list[PlanGroup]:
    return [
        g
        for g in groups
        if sum(not graph.op(n).is_view and not graph.op(n).constant for n in g.ops) > 1
    ]


def fused_group(graph: Graph, groups: list[PlanGroup], *op_types: str) -> PlanGroup:
    """The first multi-op group holding all of ``op_types``."""
    return next(
        g for g in multi_op(graph, groups) if set(op_types) <= {graph.op(n).op_type for n in g.ops}
    )


# -- every fused kernel of every small zoo model passes ------------------------------------------
@pytest.mark.parametrize("weights", ["random", "inputs"])
@pytest.mark.parametrize("name", NAMES)
def test_every_fused_kernel_of_the_max_plan_passes(name: str, weights: str) -> None:
    model, graph, _, _, groups = setup(name, weights)
    verdicts = verify_kernels(model, graph, groups, target(), Policy())
    signatures = {
        make_group(graph, g.ops, g.kind).signature(graph) for g in multi_op(graph, groups)
    }
    assert [v.signature for v in verdicts] == list(dict.fromkeys(v.signature for v in verdicts))
    assert {v.signature for v in verdicts} == signatures
    bad = [(v.ops[0], v.verdict) for v in verdicts if v.verdict != "ok"]
    assert not bad
    assert all(v.cosine >= 0.999 and 0 < v.max_abs_err < 0.05 for v in verdicts if v.rows)
    kept, counts = safe_groups(groups, verdicts)
    assert [g.ops for g in kept] == [g.ops for g in groups]
    assert counts == {
        "fused": len(multi_op(graph, groups)),
        "unverified": 0,
        "skipped_precision": 0,
        "skipped_unverified": 0,
    }


def test_an_op_without_a_numpy_kernel_falls_back_to_the_reference(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model, graph, _, _, groups = setup("resnet50")
    pg = fused_group(graph, groups, "Conv", "MaxPool")
    caplog.set_level(logging.DEBUG, logger="autotune.verify.emulate")
    [v] = verify_kernels(model, graph, [pg], target(), Policy())
    assert v.verdict == "ok"
    assert "no numpy kernel for MaxPool" in caplog.text


# -- a planted bad fusion is caught and unfused ---------------------------------------------------
def residual_norm(graph: Graph, name: str) -> list[str]:
    """A residual Add and the norm that reads it (LayerNormalization or decomposed RMSNorm)."""
    if name == "bert-base":
        ln = next(
            op
            for op in graph.ops
            if op.op_type == "LayerNormalization" and "attention/output" in op.name
        )
        return [graph.producer(ln.inputs[0]).name, ln.name]  # type: ignore[union-attr]
    scope = "/layers.0/post_attention_layernorm/"
    norm = [op.name for op in graph.ops if op.name.startswith(scope)]
    add = graph.producer(graph.op(norm[0]).inputs[0])
    assert add is not None and add.op_type == "Add"
    return [add.name, *norm]


@pytest.mark.parametrize("name", ["bert-base", "llama3-8b"])
def test_fp16_statistics_in_a_fused_norm_are_caught_and_unfused(name: str) -> None:
    model, graph, ctx, oracle, _ = setup(name, layers=1)
    group = ctx.group(residual_norm(graph, name))
    good = oracle.default(group)
    bad = dataclasses.replace(good, knobs=tuple(sorted((*good.knobs, ("stats_fp16", 1)))))
    source = ModelSource(model, graph)
    sub = extract_group(source, group, input_scale=300.0)
    assert max(float(np.abs(x).max()) for x in sub.feeds.values()) > 256

    kept_ok = verify_group(source, group, good, target(), Policy(), input_scale=300.0)
    caught = verify_group(source, group, bad, target(), Policy(), input_scale=300.0)
    assert kept_ok.verdict == "ok" and kept_ok.max_abs_err < 1e-3
    assert caught.verdict.startswith("fail: cosine")
    assert caught.cosine < 0.5 and caught.max_abs_err > 1.0
    assert caught.unfused_max_abs_err < 1e-3  # unfused kernels keep fp32 statistics

    plan = [PlanGroup(group.ops, group.kind, bad), PlanGroup(("elsewhere",), "single")]
    verdicts = verify_kernels(model, graph, plan[:1], target(), Policy(), input_scale=300.0)
    kept, counts = safe_groups(plan, verdicts)
    assert (counts["fused"], counts["skipped_precision"]) == (0, 1)
    assert [g.ops for g in kept] == [(op,) for op in group.ops] + [("elsewhere",)]
    assert all(g.verdict.startswith("unfused: fail: cosine") for g in kept[:-1])


def test_safe_groups_keeps_passing_groups_and_drops_views_when_unfusing() -> None:
    fail = KernelVerdict(
        ("mm", "view", "gelu"),
        "s1",
        0.5,
        1.0,
        1.0,
        1e-3,
        "fail: cosine 0.5 < 0.999",
        members=(("mm", "view", "gelu"), ("mm2", "view2", "gelu2")),
        views=("view", "view2"),
        status=Status.FAILED,
    )
    ok = KernelVerdict(("a", "b"), "s2", 1.0, 1e-4, 1e-3, 1e-4, "ok", status=Status.PASSED)
    groups = [
        PlanGroup(("mm", "view", "gelu"), "cube_epilogue"),
        PlanGroup(("a", "b"), "vector_chain"),
        PlanGroup(("mm2", "view2", "gelu2"), "cube_epilogue"),
        PlanGroup(("c",), "single"),
    ]
    kept, counts = safe_groups(groups, [fail, ok])
    assert [g.ops for g in kept] == [("mm",), ("gelu",), ("a", "b"), ("mm2",), ("gelu2",), ("c",)]
    assert (counts["fused"], counts["skipped_precision"]) == (1, 2)
    assert kept[2].verdict == "ok" and kept[-1].verdict == ""
    assert fail.to_json()["verdict"].startswith("fail") and fail.to_json()["status"] == "failed"


# -- the emulation is honest ---------------------------------------------------------------------
def test_split_k_in_fp32_with_fp16_operands_is_a_small_error_that_grows_with_k() -> None:
    num = numerics_for(target(), 4).with_tiles(base_k=64)
    assert (num.cube, num.acc, num.vec) == ("fp16", "fp32", "fp32")
    rng = np.random.default_rng(0)
    errors = []
    for k in (64, 512, 4096):
        a = rng.standard_normal((32, k)).astype(np.float32)
        b = rng.standard_normal((k, 32)).astype(np.float32)
        got = split_k_matmul(a, b, num)
        assert got.dtype == np.float32
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.abs(got - ref).max())
        # each product of two fp16-rounded operands is within 2^-10 of the exact one
        assert 0 < err < 2.0**-10 * float((np.abs(a) @ np.abs(b)).max())
        errors.append(err)
        # partial sums in tile order: one fp32 product per 64-wide K chunk, added in sequence
        a16, b16 = (x.astype(np.float16).astype(np.float32) for x in (a, b))
        acc = np.zeros((32, 32), np.float32)
        for lo in range(0, k, 64):
            acc = (acc + a16[:, lo : lo + 64] @ b16[lo : lo + 64]).astype(np.float32)
        np.testing.assert_array_equal(got, acc)
    assert errors[0] < errors[1] < errors[2]


def test_split_k_with_fp32_operands_still_rounds_partial_sums() -> None:
    num = numerics_for(target("fp32"), 4)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 2048)), rng.standard_normal((2048, 16))
    ref = a @ b
    chunked = split_k_matmul(a, b, num, base_k=16)
    whole = split_k_matmul(a, b, num, base_k=0)
    assert 0 < float(np.abs(chunked - ref).max()) < 1e-3
    assert not np.array_equal(chunked, whole)


@pytest.mark.parametrize("precision", ["auto", "fp16"])
def test_a_fused_matmul_gelu_is_no_worse_than_unfused(precision: str) -> None:
    model, graph, _, _, groups = setup("bert-base")
    pg = fused_group(graph, groups, "MatMul", "Erf")
    group = make_group(graph, pg.ops, pg.kind)
    sub = extract_group(ModelSource(model, graph), group)
    roles = kernel_roles(sub, fused=True)
    assert roles.role[:2] == ("cube", "fix")  # bias on the fp32 accumulator (FixPipe)
    assert set(roles.role[2:]) == {"vec"}
    assert numerics_for(target(precision), 4, pg.config).vec == (
        "fp32" if precision == "auto" else "fp16"
    )
    v = verify_group(ModelSource(model, graph), group, pg.config, target(precision), Policy())
    assert v.verdict == "ok"
    assert 0 < v.max_abs_err <= v.unfused_max_abs_err


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 6),
    keys=st.integers(1, 300),
    kv_tile=st.integers(1, 256),
    spread=st.floats(0.1, 20.0),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_online_softmax_equals_plain_softmax_in_fp32(
    rows: int, keys: int, kv_tile: int, spread: float, masked: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    s = (rng.standard_normal((2, rows, keys)) * spread).astype(np.float32)
    if masked:
        hide = rng.random(s.shape) < 0.3
        hide[..., 0] = False
        s[hide] = FLOAT_MIN
    e = np.exp(s - s.max(axis=-1, keepdims=True).astype(np.float64))
    plain = e / e.sum(axis=-1, keepdims=True)
    # every kv tile rescales the fp32 running sums once: rounding can grow by an fp32 epsilon
    # per tile (161 one-key tiles once reached 1.02e-6)
    tol = max(1e-6, 2 * float(np.finfo(np.float32).eps) * -(-keys // kv_tile))
    assert float(np.abs(online_softmax(s, FP32, kv_tile) - plain).max()) <= tol
    v = rng.standard_normal((2, keys, 8))
    out = flash_attention(s, v, FP32, kv_tile)
    assert float(np.abs(out - plain @ v).max()) <= max(1e-5, 10 * tol)


def test_compare_leaves_masked_scores_out_and_fails_non_finite_outputs() -> None:
    ref = np.array([[1.0, -np.inf, 2.0], [0.5, FLOAT_MIN, -1.0]])
    got = np.array([[1.0, -np.inf, 2.001], [0.5, -6.5e4, -1.0]])
    errs = compare(ref, got)
    assert errs.finite and errs.max_abs == pytest.approx(0.001)
    lost = compare(ref, np.where(np.isinf(got), 0.0, got))
    assert not lost.finite and not lost.masks_kept
    assert not compare(ref, got + np.array([[0, 0, np.nan], [0, 0, 0]])).finite
    assert compare(np.zeros(3), np.zeros(3)).cosine == 1.0


# -- once per signature, on few rows --------------------------------------------------------------
def test_verification_runs_once_per_signature_on_reduced_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, graph, _, _, groups = setup("bert-base", layers=4, batch=16)
    seen: list[extract.Subgraph] = []
    real = extract.extract_group

    def counting(source: ModelSource, group: FusionGroup, **kw: Any) -> extract.Subgraph:
        seen.append(real(source, group, **kw))
        return seen[-1]

    monkeypatch.setattr(extract, "extract_group", counting)
    verdicts = verify_kernels(model, graph, groups, target(), Policy(outlier_scale=0), rows=64)
    fused = multi_op(graph, groups)
    signatures = {make_group(graph, g.ops, g.kind).signature(graph) for g in fused}
    assert len(seen) == len(signatures) == len(verdicts) < len(fused)
    seen.clear()  # the outlier check runs each passing signature once more
    again = [v.verdict for v in verify_kernels(model, graph, groups, target(), Policy(), rows=64)]
    assert len(seen) == 2 * len(signatures) and again == [v.verdict for v in verdicts]
    del seen[1::2]  # each signature: its typical-scale run, then its outlier run
    assert all(v.verdict == "ok" for v in verdicts)
    big = [sub for sub in seen if sub.full_rows > 64]
    assert big and all(sub.rows == 64 for sub in big)
    for sub in big:  # batch 16 x seq 16 = 256 rows -> 4 sequences of 16 = 64 rows
        for t, x in sub.feeds.items():
            full = graph.tensors[t].static_shape
            assert x.shape == ((4, *full[1:]) if full[0] == 16 else full), (t, x.shape)
    ffn = next(v for v in verdicts if "Erf" in {graph.op(o).op_type for o in v.ops})
    assert len(ffn.members) == 4 and (ffn.rows, ffn.full_rows) == (64, 256)


def test_a_batch_one_decoder_shrinks_its_sequence_and_cuts_the_rotary_tables() -> None:
    model, graph, _, _, groups = setup("llama3-8b")
    pg = fused_group(graph, groups, "MatMul", "Neg", "Concat")  # QKV + rotary
    sub = extract_group(ModelSource(model, graph), make_group(graph, pg.ops, pg.kind), rows=64)
    [(x, seq)] = [(t, s.shape[1]) for t, s in sub.feeds.items()]
    assert graph.tensors[x].static_shape[1] == 208 and seq < 208
    [cos] = [t for t in sub.consts if t.startswith("rope.cos")]  # a copy cut for this use
    assert sub.consts[cos].shape == (1, 1, seq, graph.tensors["rope.cos"].static_shape[3])
    np.testing.assert_array_equal(
        sub.consts[cos], ModelSource(model, graph).value("rope.cos")[:, :, :seq]
    )
    assert "axis 1" in sub.note and sub.rows < sub.full_rows


def test_the_reference_promotes_casts_to_float64() -> None:
    model, graph, _, _, groups = setup("bert-base")
    pg = fused_group(graph, groups, "Cast", "Softmax")
    sub = extract_group(ModelSource(model, graph), make_group(graph, pg.ops, pg.kind))
    promoted = sub.model(float64=True)
    [cast] = [node for node in promoted.graph.node if node.op_type == "Cast"]
    assert helper.get_attribute_value(cast.attribute[0]) == onnx.TensorProto.DOUBLE
    assert {i.data_type for i in promoted.graph.initializer} <= {
        TensorProto.DOUBLE,
        TensorProto.INT64,
    }
    masks = [x for x in sub.feeds.values() if x.dtype == np.int64]
    assert masks and set(np.unique(masks[0])) <= {0, 1} and masks[0][..., 0].all()


def test_fused_attention_runs_online_softmax_through_an_isnan_guard() -> None:
    n = helper.make_node
    f32 = TensorProto.FLOAT
    model = helper.make_model(
        helper.make_graph(
            [
                n("MatMul", ["q", "kt"], ["s"], name="qk"),
                n("Softmax", ["s"], ["p"], name="softmax", axis=-1),
                n("IsNaN", ["p"], ["nan"], name="isnan"),
                n("Where", ["nan", "zero", "p"], ["pg"], name="guard"),
                n("MatMul", ["pg", "v"], ["o"], name="pv"),
            ],
            "attn",
            [
                helper.make_tensor_value_info("q", f32, [2, 4, 64, 32]),
                helper.make_tensor_value_info("kt", f32, [2, 4, 32, 96]),
                helper.make_tensor_value_info("v", f32, [2, 4, 96, 32]),
            ],
            [helper.make_tensor_value_info("o", f32, [2, 4, 64, 32])],
            [numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    graph = search_space.load_graph(model)
    group = make_group(graph, ["qk", "softmax", "isnan", "guard", "pv"])
    assert group.kind == "attention"
    config = KernelConfig(block_dim=1, base_k=16, knobs=(("kv_tile", 32),))
    source = ModelSource(model, graph)
    sub = extract_group(source, group)
    flash = kernel_roles(sub, fused=True).flash
    assert flash is not None and len(flash.guards) == 2 and sub.rows == 64 < sub.full_rows
    v = verify_group(source, group, config, target(), Policy())
    assert v.verdict == "ok" and v.cosine > 0.9999


@pytest.mark.parametrize("name", ["bert-base", "llama3-8b"])
def test_configs_with_one_numerics_key_compute_alike(name: str) -> None:
    """The verdict cache's key holds everything of a config the arithmetic reads: over every
    config of every fused kernel's grid, configs with equal keys get equal numerics."""
    _, graph, _, _, groups = setup(name, layers=1)
    oracle = CostOracle(graph, target())
    for pg in multi_op(graph, groups):
        grid = oracle.grid(make_group(graph, pg.ops, pg.kind))
        grid = grid + [dataclasses.replace(c, knobs=(("stats_fp16", 1),)) for c in grid[:8]]
        for precision in ("auto", "fp16", "bf16", "fp32"):
            by_key: dict[tuple[int, int, int], set[Any]] = {}
            for c in grid:
                by_key.setdefault(numerics_key(c), set()).add(
                    numerics_for(target(precision), 4, c)
                )
            assert all(len(v) == 1 for v in by_key.values())
