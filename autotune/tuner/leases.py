"""Trials a dead worker left RUNNING: found, failed and their parameters retried once.

An RDB storage has Optuna's heartbeat (:func:`heartbeat_kwargs`: a worker beats while its
trial runs; a trial whose beat stops is failed by Optuna's ``fail_stale_trials`` and retried
once by its ``RetryHeartbeatStaleTrialCallback``). A journal file has none, so each trial
carries a lease of the tool's own (:class:`Lease`): the worker's host and process and when it
last renewed it, renewed every ``RENEW_S`` while the trial runs. :func:`reap` fails a RUNNING
trial whose worker is gone (at once on the same host; after ``GRACE_S`` without renewal
elsewhere) and enqueues its parameters once, marked ``retry_of``, so nothing a killed worker
was doing is lost or redone twice. A retry is marked the same way on both storages.

The renewal and the grace are ``RENEW_S`` and ``GRACE_S`` seconds unless the environment sets
``AUTOTUNE_HEARTBEAT_S`` and ``AUTOTUNE_GRACE_S`` (whole seconds; a short grace lets a test see
a killed worker's trial retried within seconds).
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import threading
import time
import warnings
from types import TracebackType
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage

from autotune.exceptions import AutotuneError
from autotune.tuner.journal import owner_alive

__all__ = [
    "GRACE_S",
    "LEASE",
    "RENEW_S",
    "RETRY_OF",
    "Lease",
    "heartbeat_kwargs",
    "reap",
    "timing",
]

log = logging.getLogger(__name__)
LEASE = "autotune:lease"  # trial system attribute: {"host", "pid", "renewed"}
RETRY_OF = "retry_of"  # user attribute of a retried trial: the number of the one it repeats
RENEW_S = 10.0
GRACE_S = 60.0
RUNNING = optuna.trial.TrialState.RUNNING
FAIL = optuna.trial.TrialState.FAIL


def timing() -> tuple[float, float]:
    """The renewal and the grace in seconds: ``RENEW_S`` and ``GRACE_S``, or the environment's
    ``AUTOTUNE_HEARTBEAT_S`` and ``AUTOTUNE_GRACE_S``.

    Raises:
        AutotuneError: a value that is not a whole number of seconds >= 1, or a grace not
            longer than the renewal (a live worker's trial would be failed between beats).
    """
    renew, grace = _seconds("AUTOTUNE_HEARTBEAT_S", RENEW_S), _seconds("AUTOTUNE_GRACE_S", GRACE_S)
    if grace <= renew:
        raise AutotuneError(
            f"the grace must be longer than the heartbeat, but got AUTOTUNE_GRACE_S={grace:g} "
            f"and AUTOTUNE_HEARTBEAT_S={renew:g}"
        )
    return renew, grace


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise AutotuneError(f"{name} must be a whole number of seconds >= 1, but got '{raw}'")
    return float(raw)


def heartbeat_kwargs() -> dict[str, Any]:
    """Optuna's heartbeat for an RDB storage: the same renewal, grace and single retry."""
    renew, grace = timing()
    return {
        "heartbeat_interval": int(renew),
        "grace_period": int(grace),
        "heartbeat_stale_trial_callback": _Retry(max_retry=1),
    }


class _Retry(optuna.storages.RetryHeartbeatStaleTrialCallback):
    """Optuna's retry of a trial whose heartbeat stopped, marked as :func:`reap` marks one
    (``retry_of`` and its origin), so a retry reads the same on every storage."""

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if RETRY_OF in trial.user_attrs:
            log.warning(
                "trial %d: its worker stopped beating; failed (a retry already)", trial.number
            )
            return
        marked = copy.copy(trial)
        marked.user_attrs = {
            **trial.user_attrs,
            RETRY_OF: trial.number,
            "origin": f"retry of trial {trial.number}",
        }
        log.warning("trial %d: its worker stopped beating; failed, and retried", trial.number)
        super().__call__(study, marked)


def _beats(storage: BaseStorage) -> bool:
    """Whether Optuna's own heartbeat watches this storage's trials."""
    check = getattr(storage, "is_heartbeat_enabled", None)
    return bool(check is not None and check())


class Lease:
    """This worker's lease on a running trial, renewed by a thread until the block ends
    (nothing on a storage with Optuna's heartbeat)."""

    def __init__(self, trial: optuna.trial.Trial, renew_s: float | None = None) -> None:
        self.storage: BaseStorage = trial.storage
        self.trial_id = trial._trial_id
        self.renew_s = timing()[0] if renew_s is None else renew_s
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


def reap(study: optuna.Study, grace_s: float | None = None) -> list[int]:
    """Fail the study's RUNNING trials whose worker is gone and enqueue each one's parameters
    once (a retry is not retried again). Of two workers reaping at once, only the one whose
    update lands retries the trial. On a storage with Optuna's heartbeat, Optuna's own
    ``fail_stale_trials`` (which its ``optimize`` runs before each trial: here also when a
    study opens and before it measures, so a run of no trials leaves none stale either).

    Returns:
        The numbers of the trials failed.
    """
    storage = study._storage  # as Optuna's own retry callback reaches it
    grace_s = timing()[1] if grace_s is None else grace_s
    if _beats(storage):
        return _fail_stale(study)
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


def _fail_stale(study: optuna.Study) -> list[int]:
    """Optuna's heartbeat check: the RUNNING trials it failed."""
    running = study.get_trials(deepcopy=False, states=(RUNNING,))
    if not running:
        return []
    with warnings.catch_warnings():  # experimental since 2.9, and what RDB workers rely on
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    return [t.number for t in running if study._storage.get_trial(t._trial_id).state == FAIL]
