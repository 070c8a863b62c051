"""Killing a real `autotune tune` process with SIGKILL at a chosen point, resuming it, and
checking what survived (shared by tests/reliability/test_crash.py and
experiments/crash_faults.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna

COMPLETE, RUNNING, FAIL = (
    optuna.trial.TrialState.COMPLETE,
    optuna.trial.TrialState.RUNNING,
    optuna.trial.TrialState.FAIL,
)

# the child: a CLI run that kills itself (SIGKILL: no cleanup, no handler) at one point
CHILD = """
import os, signal, sys
{patch}
from autotune.cli.app import main
sys.argv = ["autotune", *{argv!r}]
main()
"""
# where a run can be killed; {k}: at the k-th time it gets there
FAULTS = {
    "trial": """
import autotune.tuner.steps as steps
real, n = steps.describe_trial, [0]
def describe_trial(s, trial, plan):
    n[0] += 1
    if n[0] == {k}:  # the k-th trial has been scored and is being recorded
        os.kill(os.getpid(), signal.SIGKILL)
    return real(s, trial, plan)
steps.describe_trial = describe_trial
""",
    "measurement": """
from autotune.tuner.evaluator import Evaluator
real, n = Evaluator.measure, [0]
def measure(self, plan):
    n[0] += 1
    if n[0] == {k}:  # a plan is being simulated
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, plan)
Evaluator.measure = measure
""",
    "file write": """
import search_space.atomic as atomic
real, n = atomic.os.replace, [0]
def replace(src, dst):
    n[0] += 1
    if n[0] == {k}:  # an output's bytes are written, not yet renamed over the target
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
atomic.os.replace = replace
""",
    "plan write": """
import search_space.atomic as atomic
real = atomic.os.replace
def replace(src, dst):
    if str(dst).endswith("p.json"):  # the plan's bytes are written, not yet renamed
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
atomic.os.replace = replace
""",
    "journal lock": """
from autotune.tuner.journal import OwnedLock
OwnedLock({journal!r}).acquire()
os.kill(os.getpid(), signal.SIGKILL)
""",
}


def tune_args(folder: Path, trials: int) -> list[str]:
    """A short analytic study of ``folder/m.onnx`` into ``folder``'s plan and journal."""
    return [
        "tune", str(folder / "m.onnx"), "--trials", str(trials), "--cost", "analytic",
        "--polish", "0", "--measure-every", "4", "-o", str(folder / "p.json"),
        "--storage", str(folder / "s.journal"),
    ]  # fmt: skip


def run(
    folder: Path, argv: list[str], fault: str = "", k: int = 1
) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a child process, killed at the ``k``-th arrival at ``fault`` (none
    when empty; its return code is then ``-SIGKILL``)."""
    patch = FAULTS[fault].format(k=k, journal=str(folder / "s.journal")) if fault else ""
    code = CHILD.format(patch=textwrap.dedent(patch), argv=argv)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=600
    )


def trials(folder: Path) -> list[optuna.trial.FrozenTrial]:
    """The trials of the one study in ``folder``'s journal (none without a journal)."""
    if not (folder / "s.journal").exists():
        return []
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / "s.journal"))
    )
    summaries = [  # the tuner's study (not the one of its measured plans)
        s
        for s in optuna.get_all_study_summaries(storage)
        if not s.study_name.endswith(":measured")
    ]
    if not summaries:
        return []
    (summary,) = summaries
    return optuna.load_study(study_name=summary.study_name, storage=storage).trials


def lost(before: list[optuna.trial.FrozenTrial], after: list[optuna.trial.FrozenTrial]) -> int:
    """Trials complete before that are not complete with the same parameters after."""
    now = {t.number: (t.state, t.params) for t in after}
    return sum(
        1 for t in before if t.state == COMPLETE and now.get(t.number) != (COMPLETE, t.params)
    )


def plan_whole(folder: Path) -> bool:
    """Whether the plan file, if there is one, is whole JSON."""
    path = folder / "p.json"
    if not path.exists():
        return True
    try:
        json.loads(path.read_text())
    except ValueError:
        return False
    return True
