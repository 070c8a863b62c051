"""Fitting the learned model, refitting it on a tuning run's rows, and its saved state."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kernels_by_hand import matmul
from learned_helpers import ANALYTIC, KERNELS, PARAMS, T910B, alone, rows, table
from threadpoolctl import threadpool_limits

from costmodel.analytic import AnalyticModel
from costmodel.base import KernelCost
from costmodel.exceptions import CostModelError
from costmodel.learned import FEATURES
from costmodel.learned.fit import fit_learned
from costmodel.learned.model import MIN_LOCAL_ROWS, LearnedModel
from costmodel.measure import (
    Provenance,
    measurements,
    measurements_of,
    table_frame,
    write_table,
)
from costmodel.spec import load_target


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """HGB's OpenMP threads spin against any other load on a small CI box (100x slower)."""
    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module")
def slower() -> LearnedModel:
    """Fitted on kernels that all run 1.5x the calibrated analytic latency."""
    return fit_learned(table(1.5), T910B, params=PARAMS, calibrate=False)


def copy(model: LearnedModel) -> LearnedModel:
    return LearnedModel(T910B, json.loads(json.dumps(model.state())))


# -- fitting ------------------------------------------------------------------------------------
def test_a_uniform_slowdown_is_learned(slower: LearnedModel) -> None:
    measured = 1.5 * ANALYTIC
    assert np.abs(ANALYTIC / measured - 1) == pytest.approx(1 / 3)  # the analytic is 33% off
    np.testing.assert_allclose(alone(slower, KERNELS), measured, rtol=0.05)
    assert slower.base is not None and slower.local is None
    assert slower.trained_on["rows"] == len(KERNELS)
    assert slower.trained_on["families"] == ["hand"] and slower.trained_on["calibration"] is None


def test_a_slowdown_that_depends_on_the_unit_is_learned() -> None:
    factor = {"cube": 1.5, "vector": 0.8, "mixed": 1.2}
    model = fit_learned(table(lambda k: factor[k.unit]), T910B, params=PARAMS, calibrate=False)
    expect = np.array([factor[k.unit] for k in KERNELS]) * ANALYTIC
    np.testing.assert_allclose(alone(model, KERNELS), expect, rtol=0.05)


def test_an_unrelated_kernel_in_the_plan_does_not_change_a_latency() -> None:
    """Two matmuls of one layout sharing no tensor: the analytic latencies are those of each
    alone, so the corrected ones must be too (a linear corrector reads every feature)."""
    model = fit_learned(
        table(lambda k: 2.0 if k.compulsory_bytes > 10e6 else 1.0), T910B,
        params={"kind": "ridge"}, calibrate=False,
    )  # fmt: skip
    small = matmul(512, a="a1", b="b1", out="c1")
    big = matmul(4096, a="a2", b="b2", out="c2")
    analytic = AnalyticModel(T910B)
    assert np.array_equal(analytic.predict([small, big]), alone(analytic, [small, big]))
    np.testing.assert_allclose(model.predict([small, big]), alone(model, [small, big]), rtol=1e-9)
    np.testing.assert_allclose(model.predict([big, small]), alone(model, [big, small]), rtol=1e-9)


def test_evaluate_keeps_the_analytic_breakdown(slower: LearnedModel) -> None:
    k = KERNELS[3]
    learned, analytic = slower.evaluate([k])[0], AnalyticModel(T910B).evaluate([k])[0]
    assert learned.latency_us == pytest.approx(1.5 * analytic.latency_us, rel=0.05)
    assert learned.pipes_us == analytic.pipes_us and learned.bound == analytic.bound


def test_a_table_on_disk_fits_like_the_frame(tmp_path: Path, slower: LearnedModel) -> None:
    write_table(rows(1.5)[:20], tmp_path / "a.parquet")
    write_table(rows(1.5)[20:], tmp_path / "b.parquet")
    model = fit_learned([tmp_path / "a.parquet", tmp_path / "b.parquet"], T910B, params=PARAMS,
                        calibrate=False)  # fmt: skip
    assert np.array_equal(alone(model, KERNELS), alone(slower, KERNELS))


def test_rows_of_another_target_are_refused() -> None:
    with pytest.raises(CostModelError, match=r"measured on 'ascend910', not on 'ascend910b'"):
        fit_learned(table(1.5, target="ascend910"), T910B, params=PARAMS, calibrate=False)
    mixed = pd.concat([table(1.5), table(1.5, target="ascend310p")], ignore_index=True)
    with pytest.raises(CostModelError, match="ascend310p"):
        fit_learned(mixed, T910B, params=PARAMS, calibrate=False)


# -- learning from a tuning run -----------------------------------------------------------------
def test_update_refits_only_once_there_are_enough_rows(slower: LearnedModel) -> None:
    model = copy(slower)
    before, version = alone(model, KERNELS), model.version
    new = rows(2.0)
    # records as measured, and as a table gives them back
    given_rows = new[:10] + measurements_of(table_frame(new[10 : MIN_LOCAL_ROWS - 1]))
    model.update(given_rows)
    assert model.local is None and model.refits == 0
    assert np.array_equal(alone(model, KERNELS), before) and model.version == version

    model.update(new[MIN_LOCAL_ROWS - 1 : MIN_LOCAL_ROWS])  # the 24th row
    assert model.local is not None and model.refits == 1
    assert model.version != version
    after = alone(model, KERNELS[:MIN_LOCAL_ROWS])
    np.testing.assert_allclose(after, 2.0 * ANALYTIC[:MIN_LOCAL_ROWS], rtol=0.05)
    # the base correction is untouched: the local one carries the difference
    assert np.array_equal(copy(slower).base.predict(np.zeros((1, len(FEATURES)))),
                          model.base.predict(np.zeros((1, len(FEATURES)))))  # fmt: skip


def test_update_with_nothing_changes_nothing(slower: LearnedModel) -> None:
    model = copy(slower)
    version = model.version
    model.update([])
    assert model.version == version and model.local is None


# -- state --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["model.json", "model.json.gz"])
def test_save_load_round_trip(tmp_path: Path, slower: LearnedModel, name: str) -> None:
    model = copy(slower)
    model.update(rows(2.0, kernels=KERNELS[:MIN_LOCAL_ROWS]))  # a local correction too
    path = tmp_path / name
    model.save(path)
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if name.endswith(".gz") else data)
    assert (data[:2] == b"\x1f\x8b") == name.endswith(".gz")
    assert doc["kind"] == "learned" and doc["state"]["features"] == list(FEATURES)
    back = LearnedModel.load(path)
    assert back.version == model.version
    assert back.state() == model.state()
    assert np.array_equal(alone(back, KERNELS), alone(model, KERNELS))
    assert back.local is not None and back.base is not None


@pytest.mark.parametrize(
    "features",
    [list(FEATURES)[:-1], [*FEATURES, "log_new"], list(reversed(FEATURES)), []],
    ids=["one_fewer", "one_more", "reordered", "none"],
)
def test_a_model_trained_on_other_features_is_refused(
    tmp_path: Path, slower: LearnedModel, features: list[str]
) -> None:
    state = json.loads(json.dumps(slower.state())) | {"features": features}
    with pytest.raises(CostModelError, match="other features"):
        LearnedModel(T910B, state)
    path = tmp_path / "model.json"
    slower.save(path)
    doc = json.loads(path.read_text())
    doc["state"]["features"] = features
    path.write_text(json.dumps(doc))
    with pytest.raises(CostModelError, match="other features"):
        LearnedModel.load(path)


def test_a_state_of_another_schema_is_refused(slower: LearnedModel) -> None:
    state = json.loads(json.dumps(slower.state())) | {"schema_version": 99}
    with pytest.raises(CostModelError, match="schema_version 99"):
        LearnedModel(T910B, state)


def test_an_unreadable_model_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.json.gz"
    path.write_bytes(b"\x1f\x8b" + b"not gzip at all")
    with pytest.raises(CostModelError, match="cannot read cost model file"):
        LearnedModel.load(path)


# -- rows measured on hardware --------------------------------------------------------------
def _on_hardware(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(simulator_version="real")


def test_hardware_rows_of_a_sku_are_scored_on_its_own_spec() -> None:
    """910B4 measurements teach the 910B's model: each row is scored on the 910B4's spec (20
    cube cores at 1.5 GHz), so what is learned is the factor over that spec's analytic time."""
    b4 = load_target("ascend910b4")
    analytic_b4 = alone(AnalyticModel(b4), KERNELS)
    measured = [KernelCost(1.5 * a) for a in analytic_b4]
    resident = [[0.0] * sum(s.is_load for s in k.streams) for k in KERNELS]
    real = Provenance(
        "ascend910b4", b4.spec.digest(), "auto", "real", source="real", family="hand"
    )
    frame = table_frame(measurements(KERNELS, measured, resident, real))
    model = fit_learned(frame, T910B, params=PARAMS, calibrate=False)
    on_b4 = LearnedModel(b4, json.loads(json.dumps(model.state())))
    np.testing.assert_allclose(alone(on_b4, KERNELS), 1.5 * analytic_b4, rtol=0.05)
    assert not np.allclose(analytic_b4, ANALYTIC, rtol=0.05)  # the SKU's spec mattered


def test_simulated_rows_of_another_sku_are_refused() -> None:
    frame = table(1.5).assign(target="ascend910b4")
    with pytest.raises(CostModelError, match="measured on 'ascend910b4'"):
        fit_learned(frame, T910B, params=PARAMS, calibrate=False)


@pytest.mark.parametrize(("weight", "expect"), [(1.0, 2**0.5), (50.0, 2 ** (50 / 51))])
def test_hardware_rows_weigh_as_asked(weight: float, expect: float) -> None:
    """The same kernels simulated at 1x and measured at 2x the analytic time: the fit lands at
    the weighted geometric mean."""
    frame = pd.concat([table(1.0), _on_hardware(table(2.0))], ignore_index=True)
    model = fit_learned(frame, T910B, params=PARAMS, calibrate=False, hardware_weight=weight)
    np.testing.assert_allclose(alone(model, KERNELS), expect * ANALYTIC, rtol=0.05)
