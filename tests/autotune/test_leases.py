"""The journal's owned lock and the trials' leases (autotune.tuner.journal, .leases): a dead
holder's lock is broken and a dead worker's trial is failed and retried once; a live holder's
lock and a live worker's trial are left alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest

from autotune.tuner.journal import OwnedLock
from autotune.tuner.leases import LEASE, RETRY_OF, Lease, reap

RUNNING, FAIL = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(proc.stdout)


def test_a_live_holders_lock_is_waited_for_not_broken(tmp_path: Path) -> None:
    holder, waiter = OwnedLock(tmp_path / "s.journal"), OwnedLock(tmp_path / "s.journal")
    holder.acquire()
    got = threading.Event()
    thread = threading.Thread(target=lambda: (waiter.acquire(), got.set()))
    thread.start()
    assert not got.wait(0.5)  # blocked while the holder (this process) lives
    holder.release()
    thread.join(10)
    assert got.is_set() and waiter.broken == 0
    waiter.release()
    assert not Path(waiter.path).exists()


def test_a_dead_holders_lock_is_broken_and_a_foreign_one_after_its_grace(tmp_path: Path) -> None:
    journal = tmp_path / "s.journal"
    lock = OwnedLock(journal, grace_s=3600)
    os.symlink(f"autotune:{socket.gethostname()}:{_dead_pid()}:x", lock.path)
    lock.acquire()  # a grace of an hour: only the dead holder's check can have broken it
    assert lock.broken == 1
    lock.release()
    os.symlink(str(journal), lock.path)  # Optuna's own lock names no holder
    foreign = OwnedLock(journal, grace_s=0.2)
    foreign.acquire()
    assert foreign.broken == 1
    foreign.release()


def test_releasing_a_lock_not_held_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="not held"):
        OwnedLock(tmp_path / "s.journal").release()


def _running(study: optuna.Study, lease: dict | None, retry: int | None = None) -> int:
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 9)})
    if retry is not None:
        trial.set_user_attr(RETRY_OF, retry)
    if lease is not None:
        study._storage.set_trial_system_attr(trial._trial_id, LEASE, lease)
    return trial.number


def test_reap_fails_dead_workers_trials_and_retries_each_once() -> None:
    study = optuna.create_study()
    here, now = socket.gethostname(), time.time()
    dead = _running(study, {"host": here, "pid": _dead_pid(), "renewed": now})
    alive = _running(study, {"host": here, "pid": os.getpid(), "renewed": now - 1e6})
    away = _running(study, {"host": "elsewhere", "pid": 1, "renewed": now})
    silent = _running(study, {"host": "elsewhere", "pid": 1, "renewed": now - 1e6})
    retried = _running(study, {"host": here, "pid": _dead_pid(), "renewed": now}, retry=0)
    assert sorted(reap(study)) == sorted([dead, silent, retried])
    states = {t.number: t.state for t in study.trials}
    assert states[alive] == states[away] == RUNNING
    assert states[dead] == states[silent] == states[retried] == FAIL
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert sorted(t.user_attrs[RETRY_OF] for t in waiting) == sorted([dead, silent])
    by_number = {t.number: t.params for t in study.trials}
    assert all(
        t.system_attrs["fixed_params"] == by_number[t.user_attrs[RETRY_OF]] for t in waiting
    )
    assert reap(study) == []  # nothing twice


def test_a_lease_is_renewed_while_its_trial_runs() -> None:
    study = optuna.create_study()
    trial = study.ask()
    with Lease(trial, renew_s=0.05):
        first = study.trials[0].system_attrs[LEASE]["renewed"]
        deadline = time.time() + 300  # a hang guard: it renews every 50 ms
        while study.trials[0].system_attrs[LEASE]["renewed"] == first:
            assert time.time() < deadline, "the lease was never renewed"
            time.sleep(0.02)
    lease = study.trials[0].system_attrs[LEASE]
    assert lease["pid"] == os.getpid() and lease["host"] == socket.gethostname()
