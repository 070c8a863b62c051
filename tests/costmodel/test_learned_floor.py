"""The roofline floor under the learned model's corrections, cold and warm."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernels_by_hand import add, matmul
from learned_helpers import ANALYTIC, KERNELS, PARAMS, SPEC, T910B, alone, table
from threadpoolctl import threadpool_limits

from costmodel.analytic import batch_of
from costmodel.kernel import Kernel
from costmodel.learned.fit import fit_learned
from costmodel.learned.model import LearnedModel
from costmodel.registry import make_cost_model


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """HGB's OpenMP threads spin against any other load on a small CI box (100x slower)."""
    with threadpool_limits(limits=1):
        yield


# -- the roofline floor -------------------------------------------------------------------------
def floor_us(k: Kernel) -> float:
    return 1e6 * max(
        k.cube_flops / SPEC.cube_peak_flops, k.compulsory_bytes / SPEC.hbm_peak_bytes_per_s
    )


@pytest.fixture(scope="module")
def much_faster() -> LearnedModel:
    """Told every kernel runs in 1% of its analytic time (a correction far below physics)."""
    return fit_learned(table(0.01), T910B, params=PARAMS, calibrate=False)


def test_no_correction_goes_below_the_roofline(much_faster: LearnedModel) -> None:
    floors = np.array([floor_us(k) for k in KERNELS])
    got = alone(much_faster, KERNELS)
    assert np.all(got >= floors * (1 - 1e-12))
    clamped = 0.01 * ANALYTIC < floors
    assert clamped.sum() >= 5  # the floor really binds for the large kernels
    np.testing.assert_allclose(got[clamped], floors[clamped], rtol=1e-12)
    # where the floor does not bind, the correction applies
    np.testing.assert_allclose(got[~clamped], 0.01 * ANALYTIC[~clamped], rtol=0.05)


def test_predict_batch_keeps_the_floor_and_infeasible_configs(much_faster: LearnedModel) -> None:
    tiles = [(128, 256, 256), (256, 128, 128), (128, 128, 64), (512, 256, 256)]  # last: L1
    configs = [matmul(2048, l1, (128, 128, 64), 24) for l1 in tiles]
    assert [k.feasible(SPEC)[0] for k in configs] == [True, True, True, False]
    got = much_faster.predict_batch(batch_of(configs))
    assert np.isinf(got[3])
    np.testing.assert_allclose(got[:3], floor_us(configs[0]), rtol=1e-12)
    assert np.array_equal(got[:3], alone(much_faster, configs[:3]))


@settings(max_examples=12, deadline=None)
@given(log2=st.integers(16, 24), both=st.booleans())
def test_the_roofline_floor_never_rises_above_a_warm_kernel_the_simulator_runs(
    log2: int, both: bool
) -> None:
    """No correction may go below a kernel's roofline, but inputs an earlier kernel left in L2
    do not cross HBM. With a correction that would take every kernel to nothing, what is left
    is the floor: for a chain's second add (its input ``z``, and with ``both`` its ``x`` too,
    just touched by the first), in a plan and scored as one config batch after the first, it
    stays at or below what the simulator (the oracle) runs it in. A floor over the whole I/O
    at the HBM peak rose above it (a mobilenetv3 plan's warm kernels were floored at up to 3x
    their simulated time)."""
    first = add(1 << log2, x="x", y="y", out="z")
    second = add(1 << log2, x="z", y="x" if both else "w", out="v")
    sim = make_cost_model("simulator", T910B).evaluate([first, second])
    learned = LearnedModel(T910B)
    assert learned.analytic.residency([first, second])[1][0] == 1.0  # z is resident
    learned._correction = lambda X, base=None: np.full(len(X), -50.0)  # type: ignore[method-assign]
    floored = learned.predict([first, second])
    assert 0 < floored[0] <= sim[0].latency_us
    assert 0 < floored[1] <= sim[1].latency_us
    after = learned.analytic.residency_after([first])
    (batch_floor,) = learned.predict_batch(batch_of([second]), after)
    assert 0 < batch_floor <= sim[1].latency_us
    assert batch_floor == pytest.approx(floored[1], rel=1e-9)  # one floor, two paths
