"""The simulator's determinism, noise, saved state and refusal of malformed kernels."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from simulator_helpers import add, matmul, model, one

from costmodel.exceptions import CostModelError
from costmodel.simulator import SimulatorModel


# -- determinism, noise, state ------------------------------------------------------------------
def test_deterministic_without_noise_and_reproducible_with_it() -> None:
    plan = [matmul(1024, block_dim=8), add(1 << 18, tile=4096)]
    exact = model().predict(plan)
    np.testing.assert_array_equal(exact, model().predict(plan))
    noisy = model(noise=0.05, seed=3)
    first = noisy.predict(plan)
    np.testing.assert_array_equal(first, noisy.predict(plan))
    np.testing.assert_array_equal(first, model(noise=0.05, seed=3).predict(plan))
    assert not np.array_equal(first, model(noise=0.05, seed=4).predict(plan))
    assert not np.array_equal(first, exact)


def test_noise_has_the_requested_relative_spread() -> None:
    plan = [add(4096, tile=4096, x=f"x{i}", y=f"y{i}", out=f"z{i}") for i in range(400)]
    base = one(plan[0]).latency_us
    draws = np.array(model(noise=0.1, seed=1).predict(plan)) / base
    assert draws.mean() == pytest.approx(1.0, abs=0.02)
    assert draws.std() == pytest.approx(0.1, rel=0.2)
    assert (draws > 0).all()


def test_state_round_trips_through_save_and_load(tmp_path) -> None:
    m = model(noise=0.02, seed=7, l2_chunk_bytes=32768, fast={"memo", "cores"})
    path = tmp_path / "sim.json"
    m.save(path)
    back = SimulatorModel.load(path)
    assert back.state() == m.state() and back.version == m.version
    plan = [matmul(1024, block_dim=8), add(1 << 18, tile=4096)]
    np.testing.assert_array_equal(back.predict(plan), m.predict(plan))
    assert model().version != m.version


def test_a_malformed_kernel_is_refused_with_the_rule() -> None:
    k = add(4096, tile=4096)
    bad = replace(k, streams=(replace(k.streams[0], pipe="DMA"), *k.streams[1:]))
    with pytest.raises(CostModelError, match="pipes are MTE2, FIX, MTE3"):
        model().evaluate([bad])
    with pytest.raises(CostModelError, match="unit must be cube, vector or mixed"):
        model().evaluate([replace(k, unit="npu")])
