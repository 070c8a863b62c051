"""Convergence said out loud (issue 46, item 3): the summary gives the gap to the exact
optimum where it is computable and how many trials have gained nothing."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st
from quick_study import quick_config, run, small_graph, tune_args

from autotune.tuner.loop import since_best


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
    res = run(*tune_args(tmp_path, trials=6, out="a.json"), "--json")
    assert res.exit_code == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["optimal_predicted_us"] > 0
    assert got["gap_to_optimal"] == pytest.approx(
        got["predicted_us"] / got["optimal_predicted_us"] - 1
    )
    assert 0 <= got["trials_since_best"] < got["trials"]
    table = run(*tune_args(tmp_path, trials=1, out="b.json"))
    assert table.exit_code == 0, table.stderr
    assert "exact optimum (predicted)" in table.stdout
    assert "no gain in the last" in table.stdout or "the last trial improved" in table.stdout


def test_patience_stops_a_study_once_its_trials_gain_nothing(tmp_path: Path) -> None:
    """``--trials auto`` is at most AUTO_TRIALS trials with AUTO_PATIENCE; from Python any
    patience: the study stops after that many trials in a row that did not improve its
    best, counted in trials (work), never in seconds."""
    from autotune.tuner import tune_graph
    from autotune.tuner.config import AUTO_PATIENCE, AUTO_TRIALS, trials_arg

    assert trials_arg("auto") == (AUTO_TRIALS, AUTO_PATIENCE) and trials_arg("7") == (7, 0)
    config = quick_config(tmp_path, trials=200, patience=5, seed=1)
    result = tune_graph(small_graph(), config, name="bert")
    assert result.trials < 200 and result.trials_since_best == 5


def test_a_bad_trials_value_is_a_usage_error() -> None:
    res = run("tune", "zoo:bert-base", "--trials", "lots")
    assert res.exit_code == 2 and "'auto'" in res.stderr
