"""Fusion saves what it should, under every cost model (BERT-base FFN shapes on the 910B).

MatMul -> Add(bias) -> Relu: the epilogue rides on FixPipe, so fusing saves two kernel launches
and the write + re-read of two 4096x3072 intermediates. MatMul -> Add(residual) -> LayerNorm:
the mixed kernel pays its L0C -> L2 -> UB hand-off and a cross-core sync per tile, and still
saves the two launches and the round trips.
"""

from __future__ import annotations

import pytest
from conftest import bert_ffn_block

from costmodel.lower import Lowering
from costmodel.registry import make_cost_model
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import make_group

TARGET = load_target("ascend910b")
KINDS = ["analytic", "simulator"]


@pytest.fixture(scope="module")
def ffn():
    return load_graph(bert_ffn_block())


def _plan_us(graph, model, groups: list[list[str]]) -> float:
    low = Lowering(graph, TARGET)
    gs = [make_group(graph, g) for g in groups]
    return float(model.predict(low.kernels(gs)).sum())


def _bounds(graph, intermediates: list[str]) -> tuple[float, float]:
    """(least, most) a fusion of three kernels into one may save, in us."""
    spec = TARGET.spec
    launch = spec.kernel_gap_s * 1e6
    head = spec.kernel_fixed_cycles / spec.clock_hz * 1e6
    moved = sum(graph.tensors[t].nbytes for t in intermediates) * 2  # write + re-read
    return 2 * launch, 2 * (launch + head) + 1.25 * moved / spec.hbm_bytes_per_s * 1e6


@pytest.mark.parametrize("kind", KINDS)
def test_bias_relu_epilogue_saves_launches_and_round_trips(ffn, kind: str) -> None:
    model = make_cost_model(kind, TARGET)
    unfused = _plan_us(ffn, model, [["up"], ["up_bias"], ["relu"]])
    fused = _plan_us(ffn, model, [["up", "up_bias", "relu"]])
    least, most = _bounds(ffn, ["h0", "h1"])
    assert least < unfused - fused <= most, (unfused, fused, least, most)


@pytest.mark.parametrize("kind", KINDS)
def test_residual_layernorm_mixed_kernel_still_saves(ffn, kind: str) -> None:
    model = make_cost_model(kind, TARGET)
    unfused = _plan_us(ffn, model, [["down"], ["residual"], ["ln"]])
    fused = _plan_us(ffn, model, [["down", "residual", "ln"]])
    least, most = _bounds(ffn, ["y0", "y1"])
    assert least < unfused - fused <= most, (unfused, fused, least, most)
    # the hand-off is not free: fused still costs more than the bare matmul
    assert fused > _plan_us(ffn, model, [["down"]])
