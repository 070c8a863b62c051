"""The simulator's physics on hand-built kernels: peak, HBM and GM paths, L2, launch cost."""

from __future__ import annotations

from dataclasses import replace

import pytest
from simulator_helpers import GAP_HEAD_US, SPEC, add, matmul, matmul_gelu, model, one

from costmodel.base import KernelCost
from costmodel.exceptions import InfeasibleConfig


# -- physics ------------------------------------------------------------------------------------
def test_8192_matmul_reaches_85_to_95_percent_of_peak_through_l2_panel_sharing() -> None:
    k = matmul(8192)
    with_l2 = one(k)
    without = one(k, SPEC.replace(l2_bytes=0))
    peak = SPEC.cube_peak_flops

    def frac(c: KernelCost) -> float:
        return k.cube_flops / (c.latency_us * 1e-6) / peak

    assert 0.85 <= frac(with_l2) <= 0.95
    assert with_l2.bound == "M" and with_l2.l2_hit_rate > 0.9
    # every panel re-read goes to HBM through each core's GM port: memory bound
    assert frac(without) < 0.65
    assert without.bound == "HBM" and without.l2_hit_rate == 0.0
    assert without.hbm_bytes > 5 * with_l2.hbm_bytes


def test_a_single_small_mmad_costs_its_fixed_cost_and_the_launch() -> None:
    k = matmul((32, 16, 16), (32, 16, 16), (32, 16, 16), block_dim=1)
    c = one(k)
    cube_cycles = c.pipes_us["M"] * 1e-6 * SPEC.clock_hz
    assert 24 <= cube_cycles <= 30
    assert c.bound == "launch"
    # the rest is the launch plus one load and one store round trip
    dma = (SPEC.gm_latency_cycles + SPEC.mte3_latency_cycles) / SPEC.clock_hz * 1e6
    assert GAP_HEAD_US < c.latency_us < GAP_HEAD_US + dma + 1.0


def test_a_large_elementwise_add_streams_near_effective_hbm_and_scales_with_it() -> None:
    k = add(64 << 20)  # 2 x 128 MB in, 128 MB out
    moved = 3 * (128 << 20)
    c = one(k)
    rate = moved / (c.latency_us * 1e-6)
    assert 1.1e12 <= rate <= 1.5e12
    assert rate < SPEC.hbm_peak_bytes_per_s
    assert c.bound == "HBM" and c.hbm_bytes == pytest.approx(moved)
    half = one(k, SPEC.replace(hbm_bytes_per_s=SPEC.hbm_bytes_per_s / 2))
    assert half.latency_us - GAP_HEAD_US == pytest.approx(
        2 * (c.latency_us - GAP_HEAD_US), rel=0.1
    )


def test_a_one_kilobyte_kernel_costs_the_gap_plus_heads() -> None:
    c = one(add(512, tile=512))
    assert 4.0 <= c.latency_us <= 7.0
    assert c.bound == "launch"


def test_one_core_cannot_exceed_its_gm_path() -> None:
    k = add(8 << 20, tile=16384, block_dim=1)
    c = one(k)
    loaded = 2 * (16 << 20)
    cap = SPEC.core_gm_bytes_per_cycle * SPEC.clock_hz
    assert loaded / (c.pipes_us["MTE2"] * 1e-6) <= cap * (1 + 1e-9)
    assert loaded / (c.latency_us * 1e-6) <= cap
    assert c.pipes_us["MTE2"] * 1e-6 >= loaded / cap * (1 - 1e-9)


def test_a_cube_core_reads_gm_through_its_own_wider_port() -> None:
    """A split chip's AIC loads its operands at ``cube_gm_bytes_per_cycle`` (twice an AIV's
    ``core_gm_bytes_per_cycle`` on the 910B, docs/cost-model.md): one core, no L2, a
    load-bound matmul streams faster than a vector core could, never faster than its port;
    a spec without the field prices the AIC at the AIV's rate."""
    k = matmul((128, 256, 8192), (128, 256, 256), (128, 128, 128), block_dim=1)  # 512 B runs
    loaded = sum(s.bytes for s in k.streams if s.pipe == "MTE2") * k.steps
    no_l2 = SPEC.replace(l2_bytes=0)
    port, aiv = (no_l2.gm_read_bytes_per_cycle(s) * SPEC.clock_hz for s in ("cube", "vector"))
    assert port > aiv
    wide = loaded / (one(k, no_l2).pipes_us["MTE2"] * 1e-6)
    assert 0.95 * port <= wide <= port * (1 + 1e-9)
    narrow = loaded / (one(k, no_l2.replace(cube_gm_bytes_per_cycle=0)).pipes_us["MTE2"] * 1e-6)
    assert 0.95 * aiv <= narrow <= aiv * (1 + 1e-9)


def test_a_balanced_matmul_without_double_buffering_is_1_6_to_2x_slower() -> None:
    db = matmul(4096, (128, 256, 256))
    on, off = one(db), one(replace(db, config=replace(db.config, double_buffer=False)))
    pipes = on.pipes_us
    assert 0.8 <= pipes["MTE2"] / pipes["M"] <= 1.2  # balanced: loads ~ cube
    assert 1.6 <= off.latency_us / on.latency_us <= 2.0


def test_reading_what_the_previous_kernel_wrote_hits_l2() -> None:
    producer = add(4 << 20, x="p", y="q", out="h")  # writes 8 MB, L2 holds it
    consumer = add(4 << 20, x="h", y="h2", out="o")
    m = model()
    warm = m.evaluate([producer, consumer])[1]
    cold = m.evaluate([consumer])[0]
    assert warm.latency_us < cold.latency_us
    assert warm.l2_hit_rate == pytest.approx(0.5) and cold.l2_hit_rate == 0.0
    assert warm.hbm_bytes < cold.hbm_bytes
    # without an L2 nothing carries over
    m0 = model(SPEC.replace(l2_bytes=0))
    assert m0.evaluate([producer, consumer])[1].latency_us == pytest.approx(
        m0.evaluate([consumer])[0].latency_us
    )


def test_an_infeasible_kernel_raises() -> None:
    big = matmul(1024, (512, 512, 256))
    with pytest.raises(InfeasibleConfig, match="L1 overflow"):
        model().evaluate([add(4096), big])
    with pytest.raises(InfeasibleConfig, match="UB overflow"):
        model().predict([add(1 << 20, tile=1 << 16)])


def test_mixed_kernels_pay_the_hand_off() -> None:
    mixed = matmul_gelu(1024)
    c = one(mixed)
    alone = one(matmul(1024, (128, 128, 256), (128, 128, 64), 8, out="h"))
    assert c.latency_us > alone.latency_us
    assert c.pipes_us["V"] > 0 and c.pipes_us["FIX"] > 0 and c.pipes_us["MTE3"] > 0
    assert 0.0 < c.l2_hit_rate < 1.0  # the hand-off tile is read back from L2
