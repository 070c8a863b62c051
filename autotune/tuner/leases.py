"""Trials a dead worker left RUNNING: found, failed and their parameters retried once.

An RDB storage has Optuna's heartbeat (:func:`heartbeat_kwargs`: a worker beats while its
trial runs; a trial whose beat stops is failed and retried by Optuna's
``RetryFailedTrialCallback``). A journal file has none, so each trial carries a lease of the
tool's own (:class:`Lease`): the worker's host and process and when it last renewed it, renewed
every ``RENEW_S`` while the trial runs. :func:`reap` fails a RUNNING trial whose worker is gone
(at once on the same host; after ``GRACE_S`` without renewal elsewhere) and enqueues its
parameters once, marked ``retry_of``, so nothing a killed worker was doing is lost or redone
twice.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage

from autotune.tuner.journal import owner_alive

__all__ = ["GRACE_S", "LEASE", "RENEW_S", "RETRY_OF", "Lease", "heartbeat_kwargs", "reap"]

log = logging.getLogger(__name__)
LEASE = "autotune:lease"  # trial system attribute: {"host", "pid", "renewed"}
RETRY_OF = "retry_of"  # user attribute of a retried trial: the number of the one it repeats
RENEW_S = 10.0
GRACE_S = 60.0
RUNNING = optuna.trial.TrialState.RUNNING


def heartbeat_kwargs() -> dict[str, Any]:
    """Optuna's heartbeat for an RDB storage: the same renewal, grace and single retry."""
    return {
        "heartbeat_interval": int(RENEW_S),
        "grace_period": int(GRACE_S),
        "heartbeat_stale_trial_callback": optuna.storages.RetryFailedTrialCallback(max_retry=1),
    }


def _beats(storage: BaseStorage) -> bool:
    """Whether Optuna's own heartbeat watches this storage's trials."""
    check = getattr(storage, "is_heartbeat_enabled", None)
    return bool(check is not None and check())


class Lease:
    """This worker's lease on a running trial, renewed by a thread until the block ends
    (nothing on a storage with Optuna's heartbeat)."""

    def __init__(self, trial: optuna.trial.Trial, renew_s: float = RENEW_S) -> None:
        self.storage: BaseStorage = trial.storage
        self.trial_id, self.renew_s = trial._trial_id, renew_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Lease:
        if _beats(self.storage):
            return self
        self._renew()
        self._thread = threading.Thread(target=self._run, name="autotune-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _renew(self) -> None:
        lease: dict[str, str | int | float] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "renewed": time.time(),
        }
        self.storage.set_trial_system_attr(self.trial_id, LEASE, lease)

    def _run(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                self._renew()
            except UpdateFinishedTrialError:  # finished (or reaped) meanwhile
                return


def _stale(t: optuna.trial.FrozenTrial, now: float, grace_s: float) -> bool:
    lease = t.system_attrs.get(LEASE)
    if not isinstance(lease, dict):  # killed before its lease was written (or none kept)
        start = t.datetime_start.timestamp() if t.datetime_start else now
        return now - start > grace_s
    alive = owner_alive(str(lease.get("host")), int(lease.get("pid", -1)))
    if alive is not None:
        return not alive
    return now - float(lease.get("renewed", 0.0)) > grace_s


def reap(study: optuna.Study, grace_s: float = GRACE_S) -> list[int]:
    """Fail the study's RUNNING trials whose worker is gone and enqueue each one's parameters
    once (a retry is not retried again). Of two workers reaping at once, only the one whose
    update lands retries the trial. Nothing on a storage with Optuna's heartbeat.

    Returns:
        The numbers of the trials failed.
    """
    storage = study._storage  # as Optuna's own RetryFailedTrialCallback reaches it
    if _beats(storage):
        return []
    now, failed = time.time(), []
    for t in study.get_trials(deepcopy=False, states=(RUNNING,)):
        if not _stale(t, now, grace_s):
            continue
        try:
            storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        except UpdateFinishedTrialError:  # its worker finished it, or another worker reaped
            continue
        failed.append(t.number)
        if RETRY_OF in t.user_attrs:
            log.warning("trial %d: its worker is gone; failed (a retry already)", t.number)
            continue
        attrs = {RETRY_OF: t.number, "origin": f"retry of trial {t.number}"}
        study.enqueue_trial(dict(t.params), user_attrs=attrs)
        log.warning("trial %d: its worker is gone; failed, and its parameters retried", t.number)
    return failed
