"""The contract every CostModel implementation meets (docs/cost-model.md; ``costmodel.base``).

Every kind in ``KINDS`` runs every test. Adding a model is one entry: its kind, constructor
keywords, and how to change its state (``None`` when it has none beyond the target).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from kernels_by_hand import add, matmul, matmul_gelu

from costmodel.base import CostModel, KernelCost
from costmodel.exceptions import CostModelError, InfeasibleConfig
from costmodel.kernel import PIPES, Kernel
from costmodel.registry import available_cost_models, load_cost_model, make_cost_model
from costmodel.spec import Target, load_target


@dataclass(frozen=True)
class Case:
    kind: str
    kw: dict[str, Any] = field(default_factory=dict)
    perturb: Callable[[CostModel], None] | None = None


def _slower_hbm(model: CostModel) -> None:
    state = model.state()
    model.load_state({**state, "constants": {**state["constants"], "hbm": 0.5}})


def _learn_slower(model: CostModel) -> None:
    """Measured kernels saying every kernel runs twice as long as predicted."""
    from costmodel.measure import Provenance, measurements

    rows = []
    for i in range(6):
        for k in feasible_kernels():
            c = model.evaluate([k])[0]
            res = [0.0] * sum(1 for s in k.streams if s.is_load)
            slower = KernelCost(2 * c.latency_us * (1 + i / 100))
            rows += measurements([k], [slower], [res], Provenance.of(model.target))
    model.update(rows)


KINDS = [
    Case("analytic", perturb=_slower_hbm),
    Case("learned", perturb=_learn_slower),
    Case("simulator", perturb=lambda m: m.load_state({**m.state(), "noise": 0.05})),
]

T910B = load_target("ascend910b")


@pytest.fixture(params=KINDS, ids=lambda c: c.kind)
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


def make(case: Case, target: Target = T910B) -> CostModel:
    return make_cost_model(case.kind, target, **case.kw)


def feasible_kernels() -> list[Kernel]:
    """Small kernels of every unit, each a few tiles (a simulator runs them tile by tile)."""
    return [
        matmul(512, (128, 256, 128), (128, 128, 64), block_dim=4),
        matmul(512, (128, 128, 128), (128, 128, 64), block_dim=24, double_buffer=False),
        add(1 << 16, tile=4096, block_dim=8, x="p", y="q", out="r"),
        add(1 << 15, tile=4096, block_dim=8, double_buffer=False, x="s", y="u", out="v"),
        matmul_gelu(512, block_dim=8, out="w"),
    ]


def test_feasible_kernels_cost_finite_positive_time(case: Case) -> None:
    costs = make(case).evaluate(feasible_kernels())
    assert len(costs) == len(feasible_kernels())
    for c in costs:
        assert isinstance(c, KernelCost)
        assert math.isfinite(c.latency_us) and c.latency_us > 0
        assert set(c.pipes_us) <= set(PIPES) and all(v >= 0 for v in c.pipes_us.values())
        assert c.bound and c.hbm_bytes >= 0 and 0 <= c.l2_hit_rate <= 1


def test_infeasible_kernels_raise_naming_the_buffer(case: Case) -> None:
    big = matmul(1024, (512, 256, 256))
    with pytest.raises(InfeasibleConfig, match="L1 overflow"):
        make(case).evaluate([feasible_kernels()[0], big])
    with pytest.raises(InfeasibleConfig, match="UB overflow"):
        make(case).predict([add(1 << 20, tile=1 << 16)])


def test_no_kernel_beats_its_roofline(case: Case) -> None:
    spec = T910B.spec
    model = make(case)
    for k in feasible_kernels():
        floor = max(
            k.cube_flops / spec.cube_peak_flops, k.compulsory_bytes / spec.hbm_peak_bytes_per_s
        )
        assert model.evaluate([k])[0].latency_us >= floor * 1e6


def test_inputs_resident_in_l2_make_their_reader_faster_and_nothing_else(case: Case) -> None:
    """``resident``: what L2 holds when the plan starts (a kernel inside a real step reads
    what the kernel before it just wrote). Only the tensors the kernel reads count; a warm
    kernel is never slower, and one whose 2 MB inputs all sit in L2 hits there and runs
    faster; ``None`` is the cold L2 of ``evaluate(kernels)``."""
    k = add(1 << 20, x="p", y="q", out="r")
    nbytes = float(2 << 20)
    model = make(case)
    cold = model.evaluate([k])[0]
    assert model.evaluate([k], None)[0] == cold
    assert model.evaluate([k], {"elsewhere": nbytes})[0].latency_us == cold.latency_us
    half = model.evaluate([k], {"p": nbytes})[0]
    warm = model.evaluate([k], {"p": nbytes, "q": nbytes})[0]
    assert warm.latency_us <= half.latency_us <= cold.latency_us
    assert warm.latency_us < cold.latency_us
    assert warm.l2_hit_rate > 0.9 > cold.l2_hit_rate
    assert warm.hbm_bytes < cold.hbm_bytes


def test_a_resident_context_carries_into_the_plan_as_its_own_kernels_leave_it(
    case: Case,
) -> None:
    """The context is the L2 before the first kernel: a second reader of the same inputs
    finds them as the first left them, warm or cold alike, and no kernel beats its roofline
    over the bytes it must still fetch."""
    first, second = add(1 << 20, x="p", y="q", out="r"), add(1 << 20, x="p", y="q", out="s")
    model = make(case)
    warm = model.evaluate([first, second], {"p": 2 << 20, "q": 2 << 20})
    cold = model.evaluate([first, second])
    assert warm[0].latency_us < cold[0].latency_us
    assert warm[1].latency_us == pytest.approx(cold[1].latency_us, rel=0.02)
    out_bytes = 2 << 20  # the one tensor each kernel writes
    assert warm[0].latency_us >= out_bytes / T910B.spec.hbm_peak_bytes_per_s * 1e6


def test_results_are_deterministic(case: Case) -> None:
    ks = feasible_kernels()
    model = make(case)
    first = model.predict(ks)
    assert np.array_equal(first, model.predict(ks))
    assert np.array_equal(first, make(case).predict(ks))


def test_results_follow_the_order_of_the_kernels(case: Case) -> None:
    small, big = add(1 << 12, tile=4096, x="p", y="q", out="r"), matmul(1024, block_dim=8)
    model = make(case)
    forward, backward = model.predict([small, big]), model.predict([big, small])
    assert forward[0] < forward[1] and backward[0] > backward[1]
    # no shared tensors: each kernel costs what it costs alone, whichever runs first
    assert forward == pytest.approx(backward[::-1], rel=0.05)
    assert model.predict(feasible_kernels()) == pytest.approx(
        [c.latency_us for c in model.evaluate(feasible_kernels())]
    )


def test_save_load_round_trip_gives_identical_predictions(case: Case, tmp_path) -> None:
    model = make(case)
    if case.perturb:
        case.perturb(model)
    path = tmp_path / "model.json"
    model.save(path)
    back = load_cost_model(path)
    assert type(back) is type(model) and back.kind == case.kind
    assert back.version == model.version
    assert np.array_equal(back.predict(feasible_kernels()), model.predict(feasible_kernels()))
    assert np.array_equal(
        type(model).load(path).predict(feasible_kernels()), back.predict(feasible_kernels())
    )
    gz = tmp_path / "model.json.gz"  # any kind may be saved compressed; every loader reads it
    model.save(gz)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    again = load_cost_model(gz)
    assert again.version == model.version
    assert np.array_equal(again.predict(feasible_kernels()), model.predict(feasible_kernels()))


def test_version_changes_with_the_state_and_the_target(case: Case) -> None:
    model = make(case)
    v0 = model.version
    assert isinstance(v0, str) and v0
    assert make(case, load_target("ascend910b", {"l2_bytes": 0})).version != v0
    model.update([])  # nothing to learn from: nothing changes
    assert model.version == v0
    if case.perturb:
        case.perturb(model)
        assert model.version != v0


def test_a_file_of_another_kind_is_refused(case: Case, tmp_path) -> None:
    path = tmp_path / "other.json"
    other = {"kind": "other", "target": T910B.spec.to_dict(), "precision": "auto", "state": {}}
    path.write_text(json.dumps(other))
    with pytest.raises(CostModelError, match=f"holds a 'other' cost model, not '{case.kind}'"):
        type(make(case)).load(path)
    with pytest.raises(CostModelError, match="unknown cost model 'other'"):
        load_cost_model(path)


def test_unknown_kind_lists_the_available_ones() -> None:
    with pytest.raises(CostModelError) as err:
        make_cost_model("xgb", T910B)
    assert str(err.value) == "unknown cost model 'xgb'; available: analytic, learned, simulator"
    assert available_cost_models() == ["analytic", "learned", "simulator"]
    with pytest.raises(CostModelError, match="cannot read cost model file"):
        load_cost_model("/nonexistent/model.json")


# -- what a search calls: contexts, kernels each in its own, config grids, the prior ----------
def test_contexts_are_fractions_and_the_first_kernel_starts_cold(case: Case) -> None:
    model, ks = make(case), feasible_kernels()
    rows = model.residency(ks)
    assert len(rows) == len(ks) and not any(rows[0])
    for k, row in zip(ks, rows, strict=True):
        assert len(row) == sum(1 for s in k.streams if s.pipe == "MTE2")
        assert all(0.0 <= f <= 1.0 for f in row)


def test_a_kernel_in_a_cold_context_costs_what_it_costs_alone(case: Case) -> None:
    model, ks = make(case), feasible_kernels()
    cold = [[0.0] * len(row) for row in model.residency(ks)]
    alone = [model.predict([k])[0] for k in ks]
    assert model.latencies(ks, cold) == pytest.approx(alone, rel=1e-9)


def test_a_resident_context_never_slows_a_kernel(case: Case) -> None:
    model, ks = make(case), feasible_kernels()
    rows = model.residency(ks)
    cold = model.latencies(ks, [[0.0] * len(r) for r in rows])
    warm = model.latencies(ks, [[1.0] * len(r) for r in rows])
    assert np.all(warm <= cold * (1 + 1e-9))


@pytest.mark.parametrize("kind", ["analytic", "learned"])
def test_a_plans_own_contexts_give_back_its_prediction(kind: str) -> None:
    """The models whose plan carries L2 as their contexts say: each kernel scored in its own
    context is what the whole plan predicts (what lets a search re-score only the kernels a
    move changed)."""
    model, ks = make_cost_model(kind, T910B), feasible_kernels()
    plan = [*ks, *ks]  # the second pass reads what the first left
    assert model.latencies(plan, model.residency(plan)) == pytest.approx(
        model.predict(plan), rel=1e-9
    )


def test_a_config_grid_costs_what_each_config_costs_alone(case: Case) -> None:
    from costmodel.analytic.batching import batch_of

    configs = [
        matmul(512, (128, 256, 128), (128, 128, 64), block_dim=4),
        matmul(512, (128, 128, 128), (128, 128, 64), block_dim=24, double_buffer=False),
        matmul(512, (512, 256, 256)),  # overflows L1
    ]
    model = make(case)
    got = model.predict_batch(batch_of(configs))
    assert got[:2] == pytest.approx([model.predict([k])[0] for k in configs[:2]], rel=1e-9)
    assert got[2] == np.inf


def test_the_prior_never_learns_and_only_a_learner_changes_on_rows(case: Case) -> None:
    model = make(case)
    prior, before = model.prior, model.prior.predict(feasible_kernels())
    assert not prior.learns
    v0 = model.version
    _learn_slower(model)
    assert (model.version != v0) == model.learns
    assert np.array_equal(model.prior.predict(feasible_kernels()), before)
