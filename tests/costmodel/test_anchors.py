"""Published 910B figures, reproduced end to end: ONNX model -> loader -> `none` plan with
each group's default config -> cost model (docs/cost-model.md anchors; issue bands)."""

from __future__ import annotations

import pytest
from conftest import make, weight_inputs
from onnx import TensorProto as T
from onnx import helper
from plan_helpers import plan_latency_us

from costmodel.roofline import roofline_us
from costmodel.spec import load_spec, load_target
from search_space import load_graph

PEAK = load_spec("ascend910b").cube_peak_flops
KINDS = ["analytic", "simulator"]
vi = helper.make_tensor_value_info


def _matmul(n: int):
    nodes = [helper.make_node("MatMul", ["a", "w"], ["c"], name="mm")]
    model = make(
        nodes,
        [vi("a", T.FLOAT16, [n, n]), vi("w", T.FLOAT16, [n, n])],
        [vi("c", T.FLOAT16, [n, n])],
    )
    return load_graph(weight_inputs(model, ["w"]))


def _add(n: int):
    nodes = [helper.make_node("Add", ["x", "y"], ["z"], name="add")]
    return load_graph(
        make(nodes, [vi("x", T.FLOAT16, [n]), vi("y", T.FLOAT16, [n])], [vi("z", T.FLOAT16, [n])])
    )


def _us(graph, kind: str, sets=()) -> float:
    return plan_latency_us(graph, kind, sets=sets)


@pytest.mark.parametrize("kind", KINDS)
def test_8192_fp16_matmul_reaches_85_to_95_percent_and_needs_l2(kind: str) -> None:
    graph = _matmul(8192)
    flops = 2 * 8192**3
    eff = flops / (_us(graph, kind) * 1e-6) / PEAK
    assert 0.85 <= eff <= 0.95, eff
    cold = flops / (_us(graph, kind, ["l2_bytes=0"]) * 1e-6) / PEAK
    assert cold < 0.65, cold


@pytest.mark.parametrize("kind", KINDS)
def test_large_fp16_add_streams_at_hbm_speed(kind: str) -> None:
    n = 64 * 2**20
    graph = _add(n)
    rate = 3 * n * 2 / (_us(graph, kind) * 1e-6)
    assert 1.1e12 <= rate <= 1.5e12 and rate < load_spec().hbm_peak_bytes_per_s
    half = 3 * n * 2 / (_us(graph, kind, ["hbm_bytes_per_s=6.5e11"]) * 1e-6)
    assert half == pytest.approx(rate / 2, rel=0.10)


@pytest.mark.parametrize("kind", KINDS)
def test_a_1kb_kernel_costs_the_gap_plus_heads(kind: str) -> None:
    # at least the shortest gap between kernels (3 us) plus its heads; at most the longest gap
    # (5 us) plus the shortest device time measured for a small vector kernel on a 910B
    # (torch_npu SwiGlu on [2,64,512] fp32: 5.04 us, datasets/real row 28)
    assert 4.0 <= _us(_add(256), kind) <= 10.0


@pytest.mark.parametrize("kind", KINDS)
def test_nothing_beats_the_roofline_on_zoo_plans(kind: str) -> None:
    from search_space.zoo import build

    for name in ("bert-base", "resnet50"):
        graph = load_graph(build(name, weights="inputs", scale=0.25))
        for plan in ("none", "max"):
            latency_us = plan_latency_us(graph, kind, plan)
            assert latency_us >= roofline_us(graph, load_target()), (name, plan)
