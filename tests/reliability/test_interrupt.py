"""Ctrl-C during a study: the best plan so far is written, one line says so, exit status 130,
and no trial is left running in the storage."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from corpus import valid_model
from typer.testing import CliRunner

from autotune.cli import app
from autotune.tuner.evaluator import Evaluator


def test_ctrl_c_in_a_trial_writes_the_best_plan_so_far_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "m.onnx").write_bytes(valid_model().SerializeToString())
    calls = [0]
    real = Evaluator.score

    def score(self: Evaluator, plan: object) -> float:
        calls[0] += 1
        if calls[0] == 6:  # the user presses Ctrl-C while a trial is being scored
            raise KeyboardInterrupt
        return real(self, plan)  # type: ignore[arg-type]

    monkeypatch.setattr(Evaluator, "score", score)
    plan, journal = tmp_path / "p.json", tmp_path / "s.journal"
    res = CliRunner().invoke(
        app,
        ["tune", str(tmp_path / "m.onnx"), "--trials", "50", "--cost", "analytic",
         "-o", str(plan), "--storage", str(journal)],
    )  # fmt: skip
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert res.exit_code == 130, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("interrupted: wrote the best plan found so far")
    assert plan.exists()
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))
    )
    (summary,) = [
        s
        for s in optuna.get_all_study_summaries(storage)
        if not s.study_name.endswith(":measured")
    ]
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.RUNNING not in states
    assert len(states) < 50  # the study stopped at the interrupt
