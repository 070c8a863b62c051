"""SIGKILL of a real `autotune tune` process during a trial, during a measurement, while the
plan is written and while it holds the journal's lock; then a resume. Nothing completed is
lost, no output is half-written, a trial the dead process left RUNNING is failed and its
parameters retried once, and the dead process's lock is broken at once (the resume says so),
not after a grace period."""

from __future__ import annotations

import signal
from pathlib import Path

import optuna
import pytest
from corpus import valid_model
from crash_helpers import COMPLETE, FAIL, RUNNING, lost, plan_whole, run, trials
from crash_helpers import tune_args as study_args

from costmodel.measure import read_table

KILLED = -signal.SIGKILL


def tune_args(folder: Path, n: int) -> list[str]:
    """The helpers' short study, without safe mode's generated-code check: the children are
    studies in tests, which skip it (tests/conftest.py patches that in-process only); it ran
    the plan's kernel under Triton's CPU interpreter, ~3 s of CPU a run, and no kill point is
    inside it."""
    return [*study_args(folder, n), "--codegen-check", "off"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "m.onnx").write_bytes(valid_model().SerializeToString())
    return tmp_path


def _resume_keeps(folder: Path, before: list[optuna.trial.FrozenTrial]) -> list:
    """Resume for 3 more trials: every trial completed before is still there, as it was."""
    res = run(folder, tune_args(folder, 3))
    assert res.returncode == 0, res.stderr
    after = trials(folder)
    assert any(t.state == COMPLETE for t in before) and lost(before, after) == 0
    assert RUNNING not in {t.state for t in after}
    assert (folder / "p.json").exists() and plan_whole(folder)
    return after


def test_killed_in_a_trial_the_trial_is_failed_and_retried_once(folder: Path) -> None:
    assert run(folder, tune_args(folder, 8), "trial", k=3).returncode == KILLED
    before = trials(folder)
    (left,) = [t for t in before if t.state == RUNNING]
    after = _resume_keeps(folder, before)
    assert after[left.number].state == FAIL
    retries = [t for t in after if "retry_of" in t.user_attrs]
    assert [t.user_attrs["retry_of"] for t in retries] == [left.number]  # once
    assert retries[0].state == COMPLETE and retries[0].params == left.params


def test_killed_in_a_measurement_no_trial_is_lost(folder: Path) -> None:
    assert run(folder, tune_args(folder, 8), "measurement").returncode == KILLED
    before = trials(folder)
    assert RUNNING not in {t.state for t in before}
    _resume_keeps(folder, before)
    read_table(folder / "s.measurements.parquet")  # whole


def test_killed_writing_the_plan_the_old_plan_stays_whole(folder: Path) -> None:
    assert run(folder, tune_args(folder, 3)).returncode == 0
    old = (folder / "p.json").read_bytes()
    assert run(folder, tune_args(folder, 3), "plan write").returncode == KILLED
    assert (folder / "p.json").read_bytes() == old  # the old plan, not half of the new one
    _resume_keeps(folder, trials(folder))


def test_a_dead_process_journal_lock_is_broken_at_once(folder: Path) -> None:
    assert run(folder, tune_args(folder, 2)).returncode == 0
    lock = folder / "s.journal.lock"
    assert run(folder, [], "journal lock").returncode == KILLED
    assert lock.is_symlink()  # left behind by the dead process
    res = run(folder, tune_args(folder, 2))
    assert res.returncode == 0, res.stderr
    assert "broke journal lock" in res.stderr and "gone" in res.stderr
    assert not lock.exists() and len(trials(folder)) == 4
