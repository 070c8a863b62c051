"""The analytic model's batch path against its plan path, KernelCost, constants and state."""

from __future__ import annotations

import numpy as np
import pytest
from analytic_helpers import PROPS, cost, matmul_groups, model
from hypothesis import given
from hypothesis import strategies as st
from kernels_by_hand import add, matmul, matmul_gelu

from costmodel.analytic import AnalyticConstants, AnalyticModel, batch_of
from costmodel.exceptions import CostModelError
from costmodel.kernel import PIPES, Kernel


# -- batch path = plan path -----------------------------------------------------------------------
@PROPS
@given(matmul_groups(), st.booleans())
def test_predict_batch_equals_evaluate_row_by_row(same: list[Kernel], warm: bool) -> None:
    m = model()
    producer = add(1 << 16, out="a")  # leaves the A operand (partly) resident
    resident = m.residency_after([producer]) if warm else None
    fast = m.predict_batch(batch_of(same), resident)
    for i, k in enumerate(same):
        if not k.feasible(m.target.spec)[0]:
            assert fast[i] == np.inf
            continue
        slow = m.evaluate([producer, k])[1] if warm else m.evaluate([k])[0]
        assert fast[i] == pytest.approx(slow.latency_us, rel=1e-12)


@st.composite
def plans(draw: st.DrawFn) -> list[Kernel]:
    """Chains of kernels where each may read what an earlier one wrote (names from a pool)."""
    out: list[Kernel] = []
    for n in range(draw(st.integers(1, 8))):
        names = st.sampled_from(["x", "w", *(f"o{j}" for j in range(n))])
        x, y, z = draw(names), draw(names), f"o{n}"
        size = draw(st.sampled_from([1 << 16, 1 << 20]))
        out.append(
            draw(
                st.sampled_from(
                    [
                        add(size, x=x, y=y, out=z),
                        matmul(512, a=x, out=z),
                        matmul(1024, (128, 128, 128), a=x, b=y, out=z),
                        matmul_gelu(512, out=z),
                    ]
                )
            )
        )
    return out


@PROPS
@given(plans())
def test_a_plan_costs_each_kernel_as_its_batch_row_after_the_earlier_ones(
    plan: list[Kernel],
) -> None:
    m = model()
    costs = m.evaluate(plan)
    for i, k in enumerate(plan):
        row = m.predict_batch(batch_of([k]), m.residency_after(plan[:i]))[0]
        assert costs[i].latency_us == pytest.approx(row, rel=1e-12)


def test_batch_of_refuses_kernels_of_different_groups() -> None:
    with pytest.raises(CostModelError, match="only configs of one group"):
        batch_of([matmul(1024), add()])


# -- KernelCost and constants -------------------------------------------------------------------
def test_kernel_cost_reports_every_pipe_on_the_busiest_core() -> None:
    k = matmul(4096)
    c = cost(k)
    assert set(c.pipes_us) == set(PIPES)
    m_cycles = k.cube_cycles * k.steps * k.waves
    assert c.pipes_us["M"] == pytest.approx(m_cycles / 1.8e3)
    assert c.hbm_bytes >= k.compulsory_bytes * (1 - 1 / 16)  # B is 1/3 of it, reused by rows


def test_constants_round_trip_and_change_the_version(tmp_path) -> None:
    m = model()
    v0 = m.version
    m.load_state({"constants": {"hbm": 0.5, "l2_capacity": 0.75}})
    assert m.version != v0 and m.constants.hbm == 0.5
    slower = m.evaluate([add(1 << 24)])[0].latency_us
    assert slower > model().evaluate([add(1 << 24)])[0].latency_us
    m.save(tmp_path / "a.json")
    back = AnalyticModel.load(tmp_path / "a.json")
    assert isinstance(back, AnalyticModel) and back.constants == m.constants
    assert back.version == m.version


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"constants": {"hbm_eff": 1.0}}, "unknown analytic constant"),
        ({"constants": {"hbm": 0.0}}, "hbm must be > 0"),
        ({"constants": {"head": -1.0}}, "head must be >= 0"),
        ({"schema_version": 99}, "schema_version 99"),
    ],
)
def test_bad_state_is_refused(state: dict, message: str) -> None:
    with pytest.raises(CostModelError, match=message):
        model().load_state(state)


def test_constants_default_to_the_spec() -> None:
    factors = AnalyticConstants().to_json()
    assert factors.pop("l2_fill_wait") == 0.0  # concurrent sharers hit at the L2 rate
    assert all(v == 1.0 for v in factors.values())
