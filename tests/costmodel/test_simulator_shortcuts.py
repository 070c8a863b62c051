"""The simulator's shortcuts (representative cores, macro steps, memo), each against a full run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from simulator_helpers import SPEC, add, matmul, matmul_gelu, model

from costmodel.exceptions import CostModelError
from costmodel.kernel import Kernel


# -- shortcuts, each alone against the full simulation -------------------------------------------
def test_representative_cores_match_the_full_simulation() -> None:
    ks = [
        add(3 << 18, tile=4096, block_dim=48),
        add(50 * 4096 + 4096 * 7, tile=4096, block_dim=48),
    ]
    for k in ks:
        fast, full = model(fast={"cores"}), model(fast=False)
        a, b = fast.evaluate([k])[0], full.evaluate([k])[0]
        assert fast.stats["representative"] == 1
        assert a.latency_us == pytest.approx(b.latency_us, rel=1e-6)
        assert a.hbm_bytes == pytest.approx(b.hbm_bytes, rel=1e-6)
        assert fast.stats["events"] < full.stats["events"] / 10


@pytest.mark.parametrize("double_buffer", [False, True])
@pytest.mark.parametrize(("tile", "cores"), [(32, 1), (32, 2), (64, 1), (128, 1)])
def test_blocks_smaller_than_a_line_take_no_shortcut_that_misreads_their_hits(
    tile: int, cores: int, double_buffer: bool
) -> None:
    """Blocks smaller than an L2 line (64-256 bytes here, 512-byte lines): the first block
    into a line misses and its neighbours hit, so 1 - block/line of the loads hit, and the
    fast paths (representative cores, macro steps) must cost that like the full run. (A
    macro step saw a run of hits as the steady state: 64-byte blocks on one core were costed
    all hits, 603.7 us against 734.9 us in full; representative cores counted 0.75 hits.)"""
    k = add(1 << 16, tile=tile, block_dim=cores, double_buffer=double_buffer)
    block = next(s.bytes for s in k.streams if s.pipe == "MTE2")
    assert block < SPEC.l2_line_bytes
    fast, full = model().evaluate([k])[0], model(fast=False).evaluate([k])[0]
    assert full.l2_hit_rate == pytest.approx(1 - block / SPEC.l2_line_bytes)
    assert fast.l2_hit_rate == pytest.approx(full.l2_hit_rate)
    assert fast.latency_us == pytest.approx(full.latency_us, rel=0.02)


@pytest.mark.parametrize(("tile", "cores"), [(384, 4), (320, 2), (640, 4)])
def test_blocks_that_straddle_lines_take_no_shortcut_either(tile: int, cores: int) -> None:
    """Blocks longer than a line but not a whole number of lines (768, 640, 1280 bytes) share
    a line with a neighbour too: the fast paths must see the hits that sharing gives. (With the
    guard on sub-line blocks only, 768-byte blocks on 4 cores were costed 0.00 hits against
    0.25 in full.)"""
    k = add(1 << 16, tile=tile, block_dim=cores)
    fast, full = model().evaluate([k])[0], model(fast=False).evaluate([k])[0]
    assert full.l2_hit_rate > 0
    assert fast.l2_hit_rate == pytest.approx(full.l2_hit_rate)
    assert fast.hbm_bytes == pytest.approx(full.hbm_bytes, rel=0.01)


def test_blocks_of_whole_lines_keep_the_shortcuts() -> None:
    """512-byte and 1 KB blocks share no line: cores stay interchangeable and the steady state
    periodic, so the shortcuts still apply (and agree with the full run)."""
    for tile in (256, 512):
        k = add(1 << 18, tile=tile, block_dim=4)
        fast = model()
        a, b = fast.evaluate([k])[0], model(fast=False).evaluate([k])[0]
        assert fast.stats["representative"] == 1 and fast.stats["waves_skipped"] > 0
        assert a.latency_us == pytest.approx(b.latency_us, rel=0.02)


def test_macro_steps_match_the_full_simulation() -> None:
    for k in (add(1 << 20, tile=4096, block_dim=4), matmul(2048, (128, 128, 128), block_dim=4)):
        fast, full = model(fast={"waves"}), model(fast=False)
        a, b = fast.evaluate([k])[0], full.evaluate([k])[0]
        assert fast.stats["waves_skipped"] > 0
        assert a.latency_us == pytest.approx(b.latency_us, rel=0.02)
        assert a.pipes_us["MTE2"] == pytest.approx(b.pipes_us["MTE2"], rel=0.02)
        assert a.l2_hit_rate == pytest.approx(b.l2_hit_rate, abs=0.02)


def _layers(n: int) -> list[Kernel]:
    plan = []
    x = "x0"
    for i in range(n):
        plan += [
            matmul((512, 1024, 512), (128, 128, 256), block_dim=24, a=x, b=f"w{i}", out=f"h{i}"),
            add(512 * 1024, tile=4096, x=f"h{i}", y=f"r{i}", out=f"s{i}"),
            replace(
                matmul_gelu(512, out=f"g{i}"),
                streams=tuple(
                    replace(s, tensor=f"s{i}") if s.tensor == "a" else s
                    for s in matmul_gelu(512, out=f"g{i}").streams
                ),
            ),
        ]
        x = f"g{i}"
    return plan


def test_memoised_plans_match_the_full_simulation_and_report_hits() -> None:
    plan = _layers(6)
    fast, full = model(fast={"memo"}), model(fast=False)
    a, b = fast.predict(plan), full.predict(plan)
    np.testing.assert_allclose(a, b, rtol=1e-9)
    assert fast.stats["memo_hit_rate"] > 0.5 and full.stats["memo_hit_rate"] == 0.0
    # a second evaluation of the same plan is all hits
    before = fast.stats["memo_hits"]
    np.testing.assert_array_equal(fast.predict(plan), a)
    assert fast.stats["memo_hits"] == before + len(plan)


def test_all_shortcuts_together_on_a_plan() -> None:
    plan = [*_layers(4), add(1 << 20, tile=4096, x="g3", y="q", out="end")]
    a, b = model().predict(plan), model(fast=False).predict(plan)
    np.testing.assert_allclose(a, b, rtol=0.02)
    stats = model().stats
    assert {"events", "events_per_s", "memo_hit_rate", "sim_seconds"} <= set(stats)


def test_unknown_shortcut_and_bad_arguments_are_refused() -> None:
    with pytest.raises(CostModelError, match="unknown simulator shortcut"):
        model(fast={"warp"})
    with pytest.raises(CostModelError, match="noise >= 0"):
        model(noise=-0.1)
    with pytest.raises(CostModelError, match="l2_chunk_bytes > 0"):
        model(l2_chunk_bytes=0)
