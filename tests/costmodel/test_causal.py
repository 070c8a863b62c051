"""Causal masks, however the exporter writes them, are recognised from their values, and the
key blocks they mask whole are not priced (costmodel.lower.causal): a causal attention costs
about half of the same attention unmasked at long sequences, by every model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from causal_masks import CAUSAL, NOT_CAUSAL, attention_model, grouped_attention
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.lower import Lowering
from costmodel.lower.attention import CAUSAL_SKIP
from costmodel.lower.causal import group_causal_offset
from costmodel.registry import make_cost_model
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import KernelConfig, make_group

TARGET = load_target("ascend910b")


def _group(model):
    graph = load_graph(model)
    group = make_group(graph, [op.name for op in graph.ops if not op.constant], "attention")
    return graph, group


def _offset(form: str, sq: int, sk: int, offset: int) -> int | None:
    graph, group = _group(attention_model(form, sq, sk, offset))
    return group_causal_offset(graph, group, graph.op("qk"), graph.op("pv"), (sq, sk))


@settings(max_examples=20, deadline=None)
@given(
    form=st.sampled_from(CAUSAL),
    sq=st.integers(2, 40),
    extra=st.integers(0, 40),
    data=st.data(),
)
def test_every_form_of_a_causal_mask_is_recognised_with_its_offset(form, sq, extra, data):
    """Top-left aligned (offset 0), bottom-right aligned (a cache's keys before the queries:
    offset = T - S) or anywhere between, built in the graph or given as a constant."""
    sk = sq + extra
    offset = data.draw(st.integers(0, sk - 2))
    assert _offset(form, sq, sk, offset) == offset


@pytest.mark.parametrize("form", NOT_CAUSAL)
def test_masks_that_are_not_causal_are_not_taken_for_causal(form: str) -> None:
    """A sliding window also hides keys before the query, a random mask hides keys anywhere,
    a mask the caller feeds is not known before run time, and no mask hides nothing."""
    assert _offset(form, 24, 40, 16) is None


@pytest.mark.parametrize("form", CAUSAL)
def test_a_mask_that_hides_every_key_of_a_row_is_not_causal(form: str) -> None:
    """With more queries than keys, bottom-right alignment hides every key of the first
    rows (their softmax is not of visible keys alone): nothing is skipped."""
    assert _offset(form, 24, 16, -8) is None


def test_a_group_that_outputs_its_probabilities_skips_nothing() -> None:
    model = attention_model("trilu", 16, 16, 0)
    model.graph.output.append(model.graph.value_info.add(name="p"))
    graph = load_graph(model)
    group = make_group(graph, [op.name for op in graph.ops if not op.constant], "attention")
    assert "p" in group.outputs
    assert group_causal_offset(graph, group, graph.op("qk"), graph.op("pv"), (16, 16)) is None


def _kernel(form: str, s: int, config: KernelConfig):
    graph, group = _group(attention_model(form, s, s, 0, heads=8, d=128))
    return Lowering(graph, TARGET).kernel(group, config)


@pytest.mark.parametrize("kind", ["analytic", "simulator", "learned"])
def test_a_causal_attention_costs_about_half_of_the_unmasked_one(kind: str) -> None:
    """At 2048 tokens each query block visits the key blocks up to its last row only: about
    half the cube work and the K and V traffic, so every model prices it at 0.5-0.7 of the
    same attention with a mask that hides nothing it need not read (a finite bias)."""
    config = KernelConfig(block_dim=24, base_m=128, base_n=128, base_k=128, m=128, n=128,
                          k=128, knobs=(("kv_tile", 64),))  # fmt: skip
    causal, full = (_kernel(f, 2048, config) for f in ("trilu", "random"))
    assert causal.steps < full.steps and causal.cube_flops < 0.6 * full.cube_flops
    model = make_cost_model(kind, TARGET)
    ratio = model.evaluate([causal])[0].device_us / model.evaluate([full])[0].device_us
    assert 0.45 <= ratio <= 0.7, ratio


@pytest.mark.parametrize("kind", ["analytic", "simulator"])
def test_a_kernel_that_computes_its_masked_blocks_runs_every_key_step(kind: str) -> None:
    """``causal_skip=0`` (CANN's fused-infer-attention under sparse_mode 0 computes the
    blocks a causal mask hides, then masks them): a tile runs all its key steps, as under a
    mask that hides nothing, so it costs more than the kernel that skips them and about
    what the unskipped work costs; its FLOPs stay the visible share (the useful work)."""
    knobs = (("kv_tile", 64),)
    config = KernelConfig(
        block_dim=24, base_m=128, base_n=128, base_k=128, m=128, n=128, k=128, knobs=knobs
    )
    computes = dataclasses.replace(config, knobs=(*knobs, (CAUSAL_SKIP, 0)))
    skips, every, full = (
        _kernel(f, 1024, c)
        for f, c in (("trilu", config), ("trilu", computes), ("random", config))
    )
    assert skips.steps < every.steps == full.steps == 1024 // 64
    assert every.cube_flops == skips.cube_flops
    model = make_cost_model(kind, TARGET)
    skip_us, every_us, full_us = (model.evaluate([k])[0].device_us for k in (skips, every, full))
    assert skip_us < 0.8 * every_us
    assert every_us == pytest.approx(full_us, rel=0.1)


def test_the_work_a_causal_kernel_skips_is_what_its_mask_hides() -> None:
    """Its FLOPs are those of the visible share of the score matrix, against a float64 count
    of the mask's visible entries."""
    s = 256
    config = KernelConfig(block_dim=24, base_m=64, base_n=128, base_k=128, m=64, n=128, k=128,
                          knobs=(("kv_tile", 64),))  # fmt: skip
    causal, none = (_kernel(f, s, config) for f in ("literal", "none"))
    share = np.tril(np.ones((s, s))).sum() / s**2
    assert causal.cube_flops == pytest.approx(none.cube_flops * share, rel=1e-3)


def test_grouped_query_rows_skip_what_each_rows_own_position_hides() -> None:
    """Grouped-query heads folded into the rows (rep query heads per KV head, heads-major)
    repeat the positions; a tile's steps are the mean over its query blocks of the key blocks
    up to the last key any of its rows sees, counted here from the mask's values."""
    sq = sk = 96
    graph = load_graph(grouped_attention(4, 2, sq, sk))  # 4 query heads, 2 KV
    group = make_group(graph, [op.name for op in graph.ops if not op.constant], "attention")
    lowering = Lowering(graph, TARGET)
    work = lowering._analysed(group)[1]
    assert work.heads == 2 and work.S == 2 * sq and work.causal == 0
    mask = graph.initializers["mask"]
    seen = (mask > -1e4).sum(axis=1)  # keys each position sees
    for bm, kv in ((16, 16), (64, 32), (128, 64)):
        config = KernelConfig(block_dim=8, base_m=bm, base_n=16, base_k=16, m=16, n=16, k=16,
                              knobs=(("kv_tile", kv),))  # fmt: skip
        rows = np.arange(work.S) % sq
        blocks = [-(-int(seen[rows[a : a + bm]].max()) // kv) for a in range(0, work.S, bm)]
        assert lowering.kernel(group, config).steps == -(-sum(blocks) // len(blocks)), (bm, kv)


def _scaled_after_mask(form: str, op: str, factor: float):
    """The attention with ``op`` (Mul or Div) by ``factor`` between the mask and the softmax."""
    from onnx import helper, numpy_helper

    model = attention_model(form, 32, 32, 0)
    soft = next(n for n in model.graph.node if n.op_type == "Softmax")
    masked = soft.input[0]
    soft.input[0] = "rescaled"
    model.graph.initializer.append(numpy_helper.from_array(np.float32(factor), "factor"))
    model.graph.node.insert(
        list(model.graph.node).index(soft),
        helper.make_node(op, [masked, "factor"], ["rescaled"], name="rescale"),
    )
    graph = load_graph(model)
    group = make_group(graph, [o.name for o in graph.ops if not o.constant], "attention")
    return group_causal_offset(graph, group, graph.op("qk"), graph.op("pv"), (32, 32))


@pytest.mark.parametrize(
    ("op", "factor", "causal"),
    [
        ("Mul", 2.0, True),
        ("Div", 0.5, True),
        ("Mul", -1.0, False),
        ("Mul", 1e-4, False),
        ("Div", 1e4, False),
    ],
)
def test_a_mask_counts_only_where_the_softmax_still_sees_it_masked(op, factor, causal) -> None:
    """A scale after the mask that does not shrink the masked scores keeps them masked; one
    that negates or shrinks them (against onnxruntime such a graph is not causal) does not."""
    for form in ("trilu", "range"):
        assert (_scaled_after_mask(form, op, factor) == 0) is causal, form


def test_a_bias_on_the_query_side_is_not_taken_for_a_mask() -> None:
    """An Add with a constant before the scores (a bias on Q) is not applied to the scores."""
    from onnx import helper, numpy_helper

    model = attention_model("trilu", 32, 32, 0)
    first = next(n for n in model.graph.node if n.op_type == "MatMul")
    first.input[0] = "q_biased"
    model.graph.initializer.append(numpy_helper.from_array(np.full(16, 0.1, np.float32), "qb"))
    model.graph.node.insert(0, helper.make_node("Add", ["q", "qb"], ["q_biased"], name="qbias"))
    graph = load_graph(model)
    group = make_group(graph, [o.name for o in graph.ops if not o.constant], "attention")
    assert "qbias" in group.ops
    assert group_causal_offset(graph, group, graph.op("qk"), graph.op("pv"), (32, 32)) == 0
