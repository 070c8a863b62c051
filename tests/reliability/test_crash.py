"""SIGKILL of a real `autotune tune` process during a trial, during a measurement, while the
plan is written and while it holds the journal's lock; then a resume. Nothing completed is
lost, no output is half-written, a trial the dead process left RUNNING is failed and its
parameters retried once, and the dead process's lock is broken at once (the resume says so),
not after a grace period."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
from corpus import valid_model

from costmodel.calibration import read_table

# the child: a CLI run that kills itself (SIGKILL: no cleanup, no handler) at one point
CHILD = """
import os, signal, sys
{patch}
from autotune.cli.app import main
sys.argv = ["autotune", *{argv!r}]
main()
"""
KILL_IN_TRIAL = """
from autotune.tuner.evaluator import Evaluator
real, n = Evaluator.score, [0]
def score(self, plan):
    n[0] += 1
    if n[0] == 3:  # the third trial is being scored
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, plan)
Evaluator.score = score
"""
KILL_IN_MEASUREMENT = """
from autotune.tuner.evaluator import Evaluator
def measure(self, plan):
    os.kill(os.getpid(), signal.SIGKILL)
Evaluator.measure = measure
"""
KILL_WRITING_PLAN = """
import search_space.atomic as atomic
real = atomic.os.replace
def replace(src, dst):
    if str(dst).endswith("p.json"):  # the plan's bytes are written, not yet renamed
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
atomic.os.replace = replace
"""
KILL_HOLDING_LOCK = """
from autotune.tuner.journal import OwnedLock
OwnedLock({journal!r}).acquire()
os.kill(os.getpid(), signal.SIGKILL)
"""


def _args(tmp: Path, trials: int) -> list[str]:
    return [
        "tune", str(tmp / "m.onnx"), "--trials", str(trials), "--cost", "analytic",
        "--polish", "0", "--measure-every", "4", "-o", str(tmp / "p.json"),
        "--storage", str(tmp / "s.journal"),
    ]  # fmt: skip


def _run(tmp: Path, argv: list[str], patch: str = "") -> subprocess.CompletedProcess[str]:
    code = CHILD.format(patch=textwrap.dedent(patch), argv=argv)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=600
    )


def _trials(tmp: Path) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp / "s.journal"))
    )
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage).trials


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "m.onnx").write_bytes(valid_model().SerializeToString())
    return tmp_path


def _resume_keeps(folder: Path, before: list[optuna.trial.FrozenTrial]) -> list:
    """Resume for 3 more trials: every trial completed before is still there, as it was."""
    res = _run(folder, _args(folder, 3))
    assert res.returncode == 0, res.stderr
    after = _trials(folder)
    done = {t.number: t.params for t in before if t.state == optuna.trial.TrialState.COMPLETE}
    assert done and all(after[n].params == p for n, p in done.items())
    assert all(after[n].state == optuna.trial.TrialState.COMPLETE for n in done)
    assert optuna.trial.TrialState.RUNNING not in {t.state for t in after}
    json.loads((folder / "p.json").read_text())  # a whole plan
    return after


def test_killed_in_a_trial_the_trial_is_failed_and_retried_once(folder: Path) -> None:
    res = _run(folder, _args(folder, 8), KILL_IN_TRIAL)
    assert res.returncode == -signal.SIGKILL
    before = _trials(folder)
    (left,) = [t for t in before if t.state == optuna.trial.TrialState.RUNNING]
    after = _resume_keeps(folder, before)
    assert after[left.number].state == optuna.trial.TrialState.FAIL
    retries = [t for t in after if t.user_attrs.get("retry_of") == left.number]
    assert len(retries) == 1 and retries[0].state == optuna.trial.TrialState.COMPLETE
    assert retries[0].params == left.params  # the same parameters, run again
    assert not [t for t in after if "retry_of" in t.user_attrs and t is not retries[0]]


def test_killed_in_a_measurement_no_trial_is_lost(folder: Path) -> None:
    res = _run(folder, _args(folder, 8), KILL_IN_MEASUREMENT)
    assert res.returncode == -signal.SIGKILL
    before = _trials(folder)
    assert not [t for t in before if t.state == optuna.trial.TrialState.RUNNING]
    _resume_keeps(folder, before)
    read_table(folder / "s.measurements.parquet")  # whole, if written at all


def test_killed_writing_the_plan_the_old_plan_stays_whole(folder: Path) -> None:
    assert _run(folder, _args(folder, 3)).returncode == 0
    old = (folder / "p.json").read_bytes()
    res = _run(folder, _args(folder, 3), KILL_WRITING_PLAN)
    assert res.returncode == -signal.SIGKILL
    assert (folder / "p.json").read_bytes() == old  # the old plan, not half of the new one
    _resume_keeps(folder, _trials(folder))


def test_a_dead_process_journal_lock_is_broken_at_once(folder: Path) -> None:
    assert _run(folder, _args(folder, 2)).returncode == 0
    journal = str(folder / "s.journal")
    res = _run(folder, [], KILL_HOLDING_LOCK.format(journal=journal))
    assert res.returncode == -signal.SIGKILL
    assert Path(journal + ".lock").is_symlink()  # left behind by the dead process
    res = _run(folder, _args(folder, 2))
    assert res.returncode == 0, res.stderr
    assert "broke journal lock" in res.stderr and "gone" in res.stderr
    assert not Path(journal + ".lock").exists()
    assert len(_trials(folder)) == 4
