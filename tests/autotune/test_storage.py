"""Studies survive SIGKILL and concurrent workers (journal storage, real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna

ARGS = ["zoo:gpt2", "--scale", "0.1", "--unsafe", "--measure-every", "1000"]


def _complete(journal: Path, study: str) -> int:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if not journal.exists():
        return 0
    try:
        s = optuna.load_study(
            study_name=study, storage=JournalStorage(JournalFileBackend(str(journal)))
        )
    except KeyError:
        return 0
    return sum(1 for t in s.trials if t.state == optuna.trial.TrialState.COMPLETE)


def _tune(tmp: Path, trials: int, out: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "autotune",
        "tune",
        *ARGS,
        "--trials",
        str(trials),
        "--storage",
        str(tmp / "s.journal"),
        "--study",
        "st",
        "-o",
        str(tmp / out),
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )


def test_sigkill_mid_study_loses_no_completed_trial(tmp_path: Path) -> None:
    proc = _tune(tmp_path, 500, "a.json")
    deadline = time.time() + 900  # a hang guard: 8 trials take seconds
    while _complete(tmp_path / "s.journal", "st") < 8 and time.time() < deadline:
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _complete(tmp_path / "s.journal", "st")
    assert before >= 8
    again = _tune(tmp_path, 4, "b.json")
    assert again.wait(timeout=900) == 0
    assert _complete(tmp_path / "s.journal", "st") >= before + 4
    assert (tmp_path / "b.json").exists() and not (tmp_path / "a.json").exists()


def test_two_workers_on_one_study_finish_with_the_union(tmp_path: Path) -> None:
    a, b = _tune(tmp_path, 6, "a.json"), _tune(tmp_path, 6, "b.json")
    assert a.wait(timeout=900) == 0 and b.wait(timeout=900) == 0
    assert _complete(tmp_path / "s.journal", "st") == 12
