"""A flash attention's vector side may softmax its half of a score block a few rows at a time
(``vec_rows``): PTO-ISA's flash kernel takes 32 rows of a 128-row block at a time, PyAsc's
fused-infer-attention 8. Its unified buffer then holds one slice, so larger query blocks fit,
and each slice is one more loop iteration with its own instructions and scalar bookkeeping.

Oracles: the chip's unified buffer (the 128 x 256 block of PTO-ISA's kernel does not fit whole,
double-buffered, and does when sliced), and invariants of slicing (finer slices never cost the
vector side less; a slice as large as the half is no slice at all)."""

from __future__ import annotations

import dataclasses

import pytest
from causal_masks import attention_model
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.exceptions import InfeasibleConfig
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.lower.attention import VEC_ROWS, at_query_block
from costmodel.registry import make_cost_model
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import KernelConfig, make_group

TARGET = load_target("ascend910b", (), "fp16")


def _kernel(block: int, kv_tile: int, vec_rows: int | None, keys: int = 2048) -> Kernel:
    """One head of 128-dim attention over ``keys`` keys, ``block`` query rows per tile."""
    graph = load_graph(attention_model("none", 2 * block, keys, 0, heads=1, d=128))
    group = make_group(graph, [op.name for op in graph.ops if not op.constant], "attention")
    low = Lowering(graph, TARGET)
    default = low.default(group)
    knobs = {"kv_tile": kv_tile, **({} if vec_rows is None else {VEC_ROWS: vec_rows})}
    config = at_query_block(dataclasses.replace(default, double_buffer=True), block, knobs)
    return low.kernel(group, config)


def test_a_128_row_block_fits_the_unified_buffer_only_when_its_rows_are_sliced() -> None:
    """Double-buffered 128 x 256 blocks: each AIV's 64 rows of fp32 scores, probabilities and
    PV product, twice, are 320 KiB against 192 KiB of UB; 32 rows at a time fit."""
    for kind in ("analytic", "simulator"):
        model = make_cost_model(kind, TARGET)
        with pytest.raises(InfeasibleConfig, match="UB"):
            model.evaluate([_kernel(128, 256, None)])
        (cost,) = model.evaluate([_kernel(128, 256, 32)])
        assert cost.device_us > 0, kind


@settings(max_examples=12, deadline=None)
@given(kv_tile=st.sampled_from([64, 128, 256]), rows=st.sampled_from([8, 16, 32]))
def test_finer_slices_never_cost_the_vector_side_less(kv_tile: int, rows: int) -> None:
    """Halving the rows per slice doubles the slices: each pays its instructions' issue and
    the scalar unit's bookkeeping, so a step's vector cycles grow, by at least the extra
    slices' bookkeeping."""
    coarse = _kernel(64, kv_tile, 2 * rows)
    fine = _kernel(64, kv_tile, rows)
    half = 64 // 2
    slices = [-(-half // min(r, half)) for r in (rows, 2 * rows)]
    extra = (slices[0] - slices[1]) * TARGET.spec.scalar_iter_cycles
    assert fine.vector_cycles_step >= coarse.vector_cycles_step + extra


@pytest.mark.parametrize("block", [32, 64])
def test_a_slice_as_large_as_the_half_block_is_no_slice(block: int) -> None:
    """A vector core holds half the block's rows: asking for that many, or more, changes
    nothing, footprint or cycles."""
    plain = _kernel(block, 128, None)
    for rows in (block // 2, 4 * block):
        same = _kernel(block, 128, rows)
        assert same.vector_cycles_step == plain.vector_cycles_step
        assert same.footprint == plain.footprint


def test_the_search_grid_never_slices() -> None:
    """Slicing is a property of hand-written kernels the real rows describe; the generated
    kernels the search picks from hold their half block whole."""
    graph = load_graph(attention_model("none", 256, 1024, 0, heads=2, d=128))
    group = make_group(graph, [op.name for op in graph.ops if not op.constant], "attention")
    configs: list[KernelConfig] = Lowering(graph, TARGET).grid(group)
    assert configs and all(c.knob(VEC_ROWS) == 0 for c in configs)
