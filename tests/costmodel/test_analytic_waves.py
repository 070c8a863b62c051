"""A short last wave in the closed form (costmodel.analytic.waves): HBM is shared by the cores
that are running, so the tiles of a last wave on few cores each draw a larger share."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import weight_matmul
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.analytic import AnalyticModel
from costmodel.analytic.waves import last_wave_cores
from costmodel.lower import Lowering
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import singleton_groups

TARGET = load_target("ascend910b")
CORES = TARGET.spec.cube_cores
BASE_N = 256
M, K = 16, 16384  # a weight-streaming GEMM: every tile reads its own 8 MiB of B, bound by HBM


def _kernel(tiles: int):
    """``y = x @ W`` cut into ``tiles`` column tiles of W, on every cube core."""
    graph = load_graph(weight_matmul(M, K, BASE_N * tiles))
    (group,) = singleton_groups(graph)
    lowering = Lowering(graph, TARGET)
    config = dataclasses.replace(
        lowering.default(group),
        block_dim=CORES,
        base_m=16,
        m=16,
        base_n=BASE_N,
        n=BASE_N,
        base_k=256,
        k=64,
    )
    kernel = lowering.kernel(group, config)
    assert kernel.tiles == tiles
    return kernel


def _us(model, kernel) -> float:
    return model.evaluate([kernel])[0].device_us


@pytest.mark.parametrize(("tiles", "cores", "last"), [(24, 20, 4), (40, 20, 20), (7, 20, 7)])
def test_the_last_wave_runs_on_the_tiles_left(tiles: int, cores: int, last: int) -> None:
    assert last_wave_cores(np.array([tiles]), np.array([cores]))[0] == last


@settings(max_examples=6, deadline=None)
@given(extra=st.integers(1, CORES - 1))
def test_a_short_last_wave_is_costed_as_the_simulator_runs_it(extra: int) -> None:
    """Bound by HBM, a kernel of one full wave and ``extra`` tiles more: its last wave's few
    cores each draw more of HBM (up to a core's own read path), so it takes 1.5x the time of
    the full wave alone at one extra tile, not the 2x of two full waves. The simulator (each
    core's DMA on one shared HBM) is the oracle."""
    analytic, simulator = AnalyticModel(TARGET), SimulatorModel(TARGET)
    one, more = _kernel(CORES), _kernel(CORES + extra)
    ratio = _us(analytic, more) / _us(analytic, one)
    assert ratio == pytest.approx(_us(simulator, more) / _us(simulator, one), rel=0.05)
