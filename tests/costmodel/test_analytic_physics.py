"""The analytic model's physics (roofline, monotonicity, latency hiding) and 910B bands."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from analytic_helpers import PROPS, cost, kernels, model, targets
from hypothesis import assume, given
from hypothesis import strategies as st
from kernels_by_hand import add, gelu, matmul, matmul_gelu

from costmodel.analytic import AnalyticModel, batch_of
from costmodel.analytic.l2 import GridView, line_openers
from costmodel.exceptions import InfeasibleConfig
from costmodel.kernel import Kernel, Stream, StreamBatch
from costmodel.registry import make_cost_model
from costmodel.spec import Target, load_target


def cube_efficiency(kernel: Kernel, latency_us: float, target: Target | None = None) -> float:
    spec = (target or load_target("ascend910b")).spec
    return kernel.cube_flops / spec.cube_peak_flops / (latency_us * 1e-6)


def roofline_us(kernel: Kernel, target: Target) -> float:
    spec = target.spec
    return 1e6 * max(
        kernel.cube_flops / spec.cube_peak_flops,
        kernel.compulsory_bytes / spec.hbm_peak_bytes_per_s,
    )


# -- physics ------------------------------------------------------------------------------------
@PROPS
@given(kernels, targets)
def test_nothing_beats_its_roofline(kernel: Kernel, target: Target) -> None:
    assume(kernel.feasible(target.spec)[0])
    c = AnalyticModel(target, "raw").evaluate([kernel])[0]
    assert c.latency_us >= roofline_us(kernel, target)
    assert math.isfinite(c.latency_us)


def _grow(kernel: Kernel, what: int, factor: float) -> Kernel:
    """The same kernel with one stream's bytes, or its cube/vector cycles, multiplied."""
    if what < len(kernel.streams):
        s = kernel.streams[what]
        streams = list(kernel.streams)
        streams[what] = dataclasses.replace(s, bytes=math.ceil(s.bytes * factor))
        return dataclasses.replace(kernel, streams=tuple(streams))
    return dataclasses.replace(
        kernel,
        cube_cycles=kernel.cube_cycles * factor,
        vector_cycles_tile=kernel.vector_cycles_tile * factor,
        flops=math.ceil(kernel.flops * factor),
    )


@PROPS
@given(kernels, targets, st.integers(0, 3), st.floats(1.0, 8.0))
def test_more_bytes_or_flops_never_cost_less(
    kernel: Kernel, target: Target, what: int, factor: float
) -> None:
    assume(kernel.feasible(target.spec)[0])
    m = AnalyticModel(target, "raw")
    before = m.evaluate([kernel])[0].latency_us
    after = m.evaluate([_grow(kernel, what, factor)])[0].latency_us
    assert after >= before * (1 - 1e-12)


@PROPS
@given(kernels, targets)
def test_double_buffering_never_hurts(kernel: Kernel, target: Target) -> None:
    m = AnalyticModel(target, "raw")
    db = dataclasses.replace(kernel, config=dataclasses.replace(kernel.config, double_buffer=True))
    sb = dataclasses.replace(
        kernel, config=dataclasses.replace(kernel.config, double_buffer=False)
    )
    assume(db.feasible(target.spec)[0])
    assert m.evaluate([db])[0].latency_us <= m.evaluate([sb])[0].latency_us


def test_double_buffering_hides_load_latency_unless_hbm_is_saturated() -> None:
    def ratio(cores: int, n: int = 288 * 16384) -> float:  # 288 tiles: 6 waves of 48
        db = add(n, block_dim=cores)
        sb = add(n, block_dim=cores, double_buffer=False)
        return cost(db).latency_us / cost(sb).latency_us

    assert ratio(4) < 0.7
    assert ratio(48) == pytest.approx(1.0)  # 48 cores saturate HBM: others load meanwhile
    # 256 tiles: a last wave of 16, which does not saturate HBM, so it hides its latency
    assert ratio(48, 1 << 22) < 0.99


@pytest.mark.parametrize("tile", [128, 256, 1024])
@pytest.mark.parametrize("double_buffer", [True, False])
def test_small_tiles_are_bound_by_latency_over_the_slots_as_the_simulator_says(
    tile: int, double_buffer: bool
) -> None:
    """Thousands of tiny tiles: each queue's round trip (GM latency, the add, the store and
    its latency) is spread over its slots, not hidden by them. The simulator is the oracle."""
    from costmodel.simulator import SimulatorModel

    kernel = add(1 << 20, tile=tile, block_dim=24, double_buffer=double_buffer)
    target = load_target("ascend910b")
    sim = SimulatorModel(target).evaluate([kernel])[0].latency_us
    ana = cost(kernel).latency_us
    assert ana == pytest.approx(sim, rel=0.10)
    spec = target.spec  # and it is far above what the busiest pipe alone would take
    assert ana > 3 * max(cost(kernel).pipes_us.values())
    per_tile = (ana - 1e6 * spec.kernel_gap_s) / (kernel.tiles / 24) * spec.clock_hz / 1e6
    assert per_tile > spec.gm_latency_cycles / (2 if double_buffer else 1)


@pytest.mark.parametrize("target_name", ["ascend910b", "ascend910", "ascend310p"])
@pytest.mark.parametrize(
    ("size", "l1", "l0"),
    [
        ((1024, 1024, 64), (64, 64, 64), (64, 64, 64)),  # one step
        ((2048, 2048, 256), (128, 128, 128), (128, 128, 64)),  # two
        (1024, (128, 128, 64), (128, 128, 64)),  # sixteen
    ],
)
def test_a_tile_load_issued_with_the_first_steps_loads_hides_its_latency_behind_theirs(
    target_name: str, size, l1, l0
) -> None:
    """A tile's own load (here a cold 512-byte row per tile) goes out in one queue with its
    first step's loads, and a queued transfer's first-byte latency runs from its issue, so
    single buffered it adds about its bytes at the GM path's rate per wave, not a latency of
    its own. (Measured once with the simulator, not here: it adds -221..140 cycles per wave
    on these; the closed form used to add 250..1263, a latency chained after the step
    loads'.)"""
    target = load_target(target_name)
    spec = target.spec
    kernel = matmul(size, l1, l0, 16, double_buffer=False)
    row = Stream("row", "MTE2", 512, "bij", per="tile", tensor_bytes=512 * kernel.tiles,
                 row_bytes=512)  # fmt: skip
    with_row = dataclasses.replace(kernel, streams=(*kernel.streams, row))
    analytic = AnalyticModel(target, "raw")
    plain, more = (analytic.predict_batch(batch_of([k]))[0] for k in (kernel, with_row))
    waves = math.ceil(kernel.tiles / 16)
    rate = min(spec.gm_read_bytes_per_cycle("cube"), spec.hbm_bytes_per_cycle / 16)
    bound_us = waves * 512 / rate / spec.clock_hz * 1e6
    assert plain <= more <= plain + bound_us


@pytest.mark.parametrize("target_name", ["ascend910b", "ascend910", "ascend310p"])
@pytest.mark.parametrize("double_buffer", [False, True])
@pytest.mark.parametrize(("tile", "cores"), [(32, 1), (32, 2), (64, 1), (64, 2), (128, 1)])
def test_blocks_smaller_than_a_line_wait_for_a_fetch_only_where_they_open_it(
    target_name: str, double_buffer: bool, tile: int, cores: int
) -> None:
    """An add over 64-256-byte blocks on one or two cores: most loads find the line their
    neighbour fetched. The simulator run in full is the oracle; the closed form charged a
    GM latency per block as if each opened its own line (1.5-2.7x the simulator)."""
    from costmodel.simulator import SimulatorModel

    target = load_target(target_name)
    kernel = add(1 << 16, tile=tile, block_dim=cores, double_buffer=double_buffer)
    sim = SimulatorModel(target, fast=False).evaluate([kernel])[0].latency_us
    ana = AnalyticModel(target, "raw").evaluate([kernel])[0].latency_us
    assert 0.65 * sim <= ana <= 1.25 * sim


@PROPS
@given(
    st.integers(1, 4096),
    st.sampled_from(["i", "j", "ij", "bij", "ik", "kj"]),
    st.sampled_from(["step", "tile"]),
    st.integers(1, 48),
    st.sampled_from([1.0, 2.0]),
)
def test_line_openers_is_a_fraction_that_grows_with_the_block_and_the_cores(
    block: int, key: str, per: str, cores: int, slots: float
) -> None:
    grid = np.array([[2, 64, 8]] * 3, dtype=np.float64)
    gv = GridView.of(grid, np.array([16.0] * 3), np.array([cores, cores, min(48, 2 * cores)]))
    sizes = np.array([block, 2 * block, block])
    f = line_openers(StreamBatch("t", "MTE2", sizes, sizes, key, per), gv, 512.0, slots)
    assert np.all((0 < f) & (f <= 1))
    assert f[1] >= f[0] and f[2] >= f[0]  # a bigger block, more cores at once
    assert np.all((f == 1) | (sizes < 512))  # a block of a line or more opens its own
    alone = GridView.of(np.ones((1, 3)), np.ones(1), np.array([float(cores)]))
    one = np.array([block])
    lone = line_openers(StreamBatch("t", "MTE2", one, one, key, per), alone, 512.0, slots)
    assert lone[0] == 1.0  # one tile, one step: no neighbour shares its line


@pytest.mark.parametrize("double_buffer", [False, True])
def test_a_consumer_of_resident_tensors_waits_for_no_fill(double_buffer: bool) -> None:
    """A matmul right after the kernels that wrote both operands finds them in L2: cores
    sharing a panel hit it, nobody fetches it, so nobody waits a GM latency for a fill."""
    from costmodel.simulator import SimulatorModel

    target = load_target("ascend910b")
    plan = [
        add(1 << 20, out="a"),
        add(1 << 20, out="b"),
        matmul(1024, (64, 64, 64), (64, 64, 64), double_buffer=double_buffer),
    ]
    sim = SimulatorModel(target).evaluate(plan)[2].latency_us
    warm = model().evaluate(plan)[2]
    assert warm.l2_hit_rate == pytest.approx(1.0)
    assert warm.latency_us == pytest.approx(sim, rel=0.15)
    assert warm.latency_us < cost(plan[2]).latency_us  # cheaper than cold


def test_an_overflowing_config_is_infeasible_never_cheap() -> None:
    big = matmul(1024, (512, 256, 256))  # L1 needs 768 KB with double buffering
    with pytest.raises(InfeasibleConfig, match="L1 overflow"):
        model().evaluate([matmul(1024), big])
    batch = batch_of([matmul(1024), big, matmul(1024, (128, 128, 128))])
    out = model().predict_batch(batch)
    assert np.isfinite(out[[0, 2]]).all() and out[1] == np.inf


# -- 910B sanity bands ----------------------------------------------------------------------
def test_8192_matmul_lands_near_cube_peak_and_needs_l2() -> None:
    k = matmul(8192)
    with_l2 = cube_efficiency(k, cost(k).latency_us)
    without = cube_efficiency(k, cost(k, l2_bytes=0).latency_us)
    assert 0.80 <= with_l2 <= 0.95
    assert without < 0.6 * with_l2
    assert cost(k).bound == "M" and cost(k, l2_bytes=0).bound == "HBM"


def test_large_add_streams_at_hbm_rate_and_scales_with_it() -> None:
    k = add(1 << 26)  # 3 x 128 MB, far beyond L2
    full = k.compulsory_bytes / cost(k).latency_us / 1e6  # TB/s
    half = k.compulsory_bytes / cost(k, hbm_bytes_per_s=0.65e12).latency_us / 1e6
    assert 1.1 <= full <= 1.5
    assert half == pytest.approx(full / 2, rel=0.1)
    assert cost(k).bound == "HBM"


def test_a_tiny_kernel_costs_gap_and_heads() -> None:
    c = cost(add(512, tile=512))  # 1 KB per operand
    assert 4.0 <= c.latency_us <= 7.0
    assert c.bound == "launch"


def test_one_cube_core_reads_gm_through_its_own_wider_port() -> None:
    """A split chip's AIC loads at ``cube_gm_bytes_per_cycle`` (docs/cost-model.md): one
    core, no L2, a load-bound matmul moves its operands faster than an AIV's port allows,
    never faster than its own; without the field, at the AIV's rate."""
    spec = load_target("ascend910b").spec.replace(l2_bytes=0)
    k = matmul((128, 256, 8192), (128, 256, 256), (128, 128, 128), block_dim=1)  # 512 B runs
    read = sum(s.bytes for s in k.streams if s.pipe == "MTE2") * k.steps

    def per_cycle(s: object) -> float:
        c = AnalyticModel(Target(s), "raw").evaluate([k])[0]
        return read / (c.pipes_us["MTE2"] * 1e-6 * spec.clock_hz)

    port, aiv = spec.gm_read_bytes_per_cycle("cube"), spec.gm_read_bytes_per_cycle("vector")
    assert aiv < 0.95 * port <= per_cycle(spec) <= port * (1 + 1e-9)
    assert 0.95 * aiv <= per_cycle(spec.replace(cube_gm_bytes_per_cycle=0)) <= aiv * (1 + 1e-9)


def test_one_core_cannot_beat_its_gm_path() -> None:
    spec = load_target("ascend910b").spec
    k = add(1 << 22, block_dim=1)
    read = sum(s.bytes for s in k.streams if s.pipe == "MTE2") * k.tiles
    per_cycle = read / (cost(k).latency_us * 1e-6 * spec.clock_hz)
    assert per_cycle <= spec.core_gm_bytes_per_cycle  # stores leave through L2, uncapped
    assert per_cycle > 0.9 * spec.core_gm_bytes_per_cycle
    assert cost(k).bound == "MTE2"


def test_a_balanced_matmul_without_double_buffering_is_much_slower() -> None:
    db, sb = matmul(8192), matmul(8192, double_buffer=False)
    pipes = cost(db).pipes_us  # balanced: its loads take about as long as the cube
    assert pipes["MTE2"] / pipes["M"] == pytest.approx(1.0, abs=0.15)
    # one slot per queue: MTE2 and M each alternate with MTE1 (0.6 x M at these tiles), so
    # the step takes MTE1 + max(MTE2, M): 1.6x
    assert 1.5 <= cost(sb).latency_us / cost(db).latency_us <= 2.0


def test_reading_what_the_previous_kernel_wrote_is_cheaper() -> None:
    producer, consumer = add(1 << 22, out="t"), add(1 << 22, x="t", y="w", out="u")
    m = model()
    in_plan = m.evaluate([producer, consumer])[1]
    alone = m.evaluate([consumer])[0]
    assert in_plan.latency_us < alone.latency_us
    assert in_plan.l2_hit_rate == pytest.approx(0.5) and alone.l2_hit_rate == 0
    cold = model(l2_bytes=0).evaluate([producer, consumer])[1]
    assert cold.latency_us == pytest.approx(model(l2_bytes=0).evaluate([consumer])[0].latency_us)


def test_fusing_an_epilogue_saves_a_launch_and_the_round_trip() -> None:
    m = model()
    fused = m.evaluate([matmul_gelu(2048)])[0]
    unfused = m.evaluate([matmul(2048, (128, 128, 256), (128, 128, 64), out="h"), gelu(2048)])
    assert fused.latency_us < sum(c.latency_us for c in unfused)
    assert fused.hbm_bytes < sum(c.hbm_bytes for c in unfused)


def test_on_the_fly_nd2nz_slows_the_port_not_hbm() -> None:
    """Converting an activation to NZ on the way in (MTE2's ND2NZ) runs at ``nd2nz_rate`` of
    the core's load rate: it slows the port, not the HBM its bytes come from. On the 910B a
    cube core's share of HBM (~30 B/cycle with 24 busy) is below even its converted port rate
    (64 x 0.8 B/cycle), so converting an activation costs a matmul little beyond its L2
    re-reads; the closed form charges what the simulator charges, where slowing HBM by the
    rate made it charge ~4.5% on every size against the simulator's 0-1%."""
    target = load_target("ascend910b")
    sim = make_cost_model("simulator", target)
    gaps = []
    for size in (1024, 2048, 4096):
        ratios = []
        for m in (model(), sim):
            plain, converted = (
                m.evaluate([matmul(size, nd2nz=nd2nz, spec=target.spec)])[0].latency_us
                for nd2nz in (False, True)
            )
            assert converted >= plain * (1 - 1e-9)  # converting never makes a load faster
            ratios.append(converted / plain)
        gaps.append(abs(ratios[0] - ratios[1]))
    assert float(np.mean(gaps)) < 0.025
