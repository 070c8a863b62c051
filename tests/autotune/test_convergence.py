"""Convergence said out loud (issue 46, item 3): the summary gives the gap to the exact
optimum where it is computable and how many trials have gained nothing."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from autotune.cli import app
from autotune.tuner.loop import since_best

runner = CliRunner()


def _trials(values: list[float]) -> list[optuna.trial.FrozenTrial]:
    study = optuna.create_study()
    for v in values:
        study.add_trial(optuna.trial.create_trial(value=v))
    return study.trials


@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=30))
def test_trials_since_best_counts_those_after_the_first_best(values: list[float]) -> None:
    first_best = values.index(min(values))
    assert since_best(_trials(values)) == len(values) - 1 - first_best
    # the order a storage returns them in does not matter: trial numbers do
    assert since_best(list(reversed(_trials(values)))) == len(values) - 1 - first_best


def test_the_summary_gives_the_gap_to_the_optimum_and_the_trials_without_gain(
    tmp_path: Path,
) -> None:
    args = [
        "tune",
        "zoo:bert-base",
        "--layers",
        "1",
        "--scale",
        "0.25",
        "--trials",
        "6",
        "--cost",
        "analytic",
        "--polish",
        "0",
        "--unsafe",
        "--storage",
        str(tmp_path / "s.journal"),
    ]
    res = runner.invoke(app, [*args, "-o", str(tmp_path / "a.json"), "--json"])
    assert res.exit_code == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["optimal_predicted_us"] > 0
    assert got["gap_to_optimal"] == pytest.approx(
        got["predicted_us"] / got["optimal_predicted_us"] - 1
    )
    assert 0 <= got["trials_since_best"] < got["trials"]
    table = runner.invoke(app, [*args, "--trials", "1", "-o", str(tmp_path / "b.json")])
    assert table.exit_code == 0, table.stderr
    assert "exact optimum (predicted)" in table.stdout
    assert "no gain in the last" in table.stdout or "the last trial improved" in table.stdout
