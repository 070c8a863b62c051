"""L2 column groups (``costmodel.lower.cube_l2``): a matmul whose B overflows the L2 reads B
once per row of tiles in row-major order, and once in all when its columns are cut into
groups the L2 holds (CANN MatMulV3's L2 tiling). Oracles are byte counts from first
principles: ``A + gi x B`` without groups, ``B + g x A`` with them, plus the output."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import weight_matmul
from hypothesis import given
from hypothesis import strategies as st

from costmodel.analytic import AnalyticModel
from costmodel.lower import Lowering
from costmodel.lower.cube_l2 import KNOB, L2_SHARE, l2_group_choices
from costmodel.simulator import SimulatorModel
from costmodel.spec import Target, load_target
from search_space import load_graph
from search_space.ir import FusionGroup, singleton_groups

BASE = load_target("ascend910b")
SMALL_L2 = Target(BASE.spec.replace(l2_bytes=12 << 20), BASE.precision)  # 12 MiB
M, K, N = 2048, 2048, 4096  # fp16: A 8 MiB, B 16 MiB, C 16 MiB
A_BYTES, B_BYTES, C_BYTES = M * K * 2, K * N * 2, M * N * 2


def _lowered(target: Target, m: int = M, k: int = K, n: int = N) -> tuple[Lowering, FusionGroup]:
    graph = load_graph(weight_matmul(m, k, n))
    (group,) = singleton_groups(graph)
    return Lowering(graph, target), group


def _plain(config):  # the same tiles without the knob
    return dataclasses.replace(config, knobs=tuple(kv for kv in config.knobs if kv[0] != KNOB))


def test_groups_are_offered_only_when_b_overflows_its_share_of_the_l2() -> None:
    low, group = _lowered(BASE)  # 16 MiB of B against 192 MiB of L2
    assert all(c.knob(KNOB, 1) == 1 for c in low.grid(group))
    fits = Target(BASE.spec.replace(l2_bytes=B_BYTES), BASE.precision)  # B just fits: no cut
    low, group = _lowered(fits)
    assert all(c.knob(KNOB, 1) == 1 for c in low.grid(group))
    low, group = _lowered(SMALL_L2)
    work = low._analysed(group)[1]
    choices = l2_group_choices(work, SMALL_L2)
    assert choices, "B overflows the L2: the cut must be offered"
    for g in choices:
        assert (N // 16) % g == 0  # whole fractal columns per group
        assert B_BYTES * L2_SHARE <= SMALL_L2.spec.l2_bytes * g
    smaller = [g for g in range(2, min(choices)) if (N // 16) % g == 0]
    assert all(B_BYTES * L2_SHARE > SMALL_L2.spec.l2_bytes * g for g in smaller)
    grouped = [c for c in low.grid(group) if c.knob(KNOB, 1) > 1]
    assert grouped and all(c.base_m < M and c.base_n <= N // c.knob(KNOB) for c in grouped)
    assert low.default(group).knob(KNOB, 1) == min(choices)


@pytest.mark.parametrize("model", ["simulator", "analytic"])
def test_groups_read_b_once_where_rows_of_tiles_read_it_once_each(model: str) -> None:
    low, group = _lowered(SMALL_L2)
    grouped = low.default(group)
    g = grouped.knob(KNOB)
    plain = _plain(grouped)
    rows = -(-M // grouped.base_m)
    cost = SimulatorModel(SMALL_L2) if model == "simulator" else AnalyticModel(SMALL_L2, "raw")
    with_groups, without = cost.evaluate([low.kernel(group, grouped), low.kernel(group, plain)])
    # without groups every row of tiles sweeps all of B through an L2 B alone fills: most
    # of B misses on each row (a wave's rows overlap, so not all of it)
    assert without.hbm_bytes >= 0.25 * rows * B_BYTES
    # with them each group's B slice stays resident while its rows pass: B once, A per group
    assert A_BYTES + B_BYTES <= with_groups.hbm_bytes <= 1.15 * (B_BYTES + g * A_BYTES + C_BYTES)
    assert with_groups.latency_us < without.latency_us


def test_the_models_agree_on_a_grouped_matmul() -> None:
    low, group = _lowered(SMALL_L2)
    kernel = low.kernel(group, low.default(group))
    (sim,) = SimulatorModel(SMALL_L2).evaluate([kernel])
    (ana,) = AnalyticModel(SMALL_L2, "raw").evaluate([kernel])
    assert ana.hbm_bytes == pytest.approx(sim.hbm_bytes, rel=0.2)
    assert ana.latency_us == pytest.approx(sim.latency_us, rel=0.2)


@given(st.data())
def test_a_batch_of_mixed_group_counts_lowers_each_row_as_alone(data: st.DataObject) -> None:
    low, group = _lowered(SMALL_L2, m=1024)
    grid = low.grid(group)
    picks = data.draw(st.lists(st.sampled_from(range(len(grid))), min_size=1, max_size=8))
    configs = [grid[i] for i in picks]
    batch = low.batch(group, configs)
    alone = [low.kernel(group, c) for c in configs]
    assert [batch.kernel(i) for i in range(len(configs))] == alone
    model = AnalyticModel(SMALL_L2, "raw")
    scores = model.predict_batch(batch)
    single = [model.predict_batch(low.batch(group, [c]))[0] for c in configs]
    np.testing.assert_allclose(scores, single, rtol=1e-9)
