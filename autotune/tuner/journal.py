"""The journal file a study is stored in: its write lock, which names its owner so a dead
owner's lock is broken at once, the repair of a journal a killed process cut off, and a
storage that writes a trial's parameters in one append.

Optuna's own file lock (a symbolic link at ``<journal>.lock``) says nothing of who holds it,
so a lock left by a killed process blocks every later writer for its 30 s grace period.
:class:`OwnedLock` takes the same path (so it and Optuna's lock exclude each other) and makes
the link's target name the holder: ``autotune:<host>:<pid>:<token>``. A waiter on the same
host whose holder's process is gone breaks the lock now; a lock of another host, or of a
holder it cannot read (Optuna's own), is broken after the grace period as Optuna does.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, distribution_to_json
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileSymlinkLock
from optuna.storages.journal._storage import JournalOperation

from autotune.exceptions import AutotuneError
from search_space.atomic import atomic_write_bytes

__all__ = [
    "GRACE_S",
    "BatchedJournalStorage",
    "OwnedLock",
    "batched_params",
    "mend_journal",
    "owner_alive",
]

log = logging.getLogger(__name__)
GRACE_S = 30.0  # a lock whose holder cannot be checked is broken after this long unchanged
_PREFIX = "autotune"


def owner_alive(host: str, pid: int) -> bool | None:
    """Whether process ``pid`` of ``host`` still runs: None when it cannot be told (another
    host)."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


class OwnedLock(JournalFileSymlinkLock):
    """The journal's write lock, naming its holder (see the module's docstring): Optuna's
    symbolic-link lock at the same path, with its own acquire and release.

    Attributes:
        broken: locks of dead holders this object broke (each one logged once).
    """

    def __init__(self, journal: str | os.PathLike[str], grace_s: float = GRACE_S) -> None:
        super().__init__(str(journal), grace_period=None)
        self.path = str(journal) + ".lock"
        self.grace_s = grace_s
        self.broken = 0
        self._token = ""

    def acquire(self) -> bool:
        """Block until the lock is ours (breaking a dead holder's at once)."""
        delay, seen, since = 0.001, None, time.monotonic()
        while True:
            token = f"{_PREFIX}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
            try:
                os.symlink(token, self.path)
            except FileExistsError:
                holder = self._holder()
                if holder != seen:
                    seen, since = holder, time.monotonic()
                stale = self._dead(holder) or time.monotonic() - since > self.grace_s
                if holder is not None and stale and self._break(holder):
                    continue
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
                continue
            self._token = token
            return True

    def release(self) -> None:
        """Give the lock up (it must be ours)."""
        if self._holder() != self._token:
            raise RuntimeError(f"journal lock '{self.path}' is not held by this process")
        self._token = ""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _holder(self) -> str | None:
        try:
            return os.readlink(self.path)
        except OSError as err:  # gone (released meanwhile), or not a link
            return "" if err.errno == errno.EINVAL else None

    @staticmethod
    def _dead(holder: str | None) -> bool:
        parts = (holder or "").split(":")
        if len(parts) != 4 or parts[0] != _PREFIX or not parts[2].isdigit():
            return False  # not ours (Optuna's lock): only the grace period breaks it
        return owner_alive(parts[1], int(parts[2])) is False

    def _break(self, holder: str) -> bool:
        """Remove the lock if it is still ``holder``'s: rename it aside first, so of two
        waiters breaking it at once only one removes it (the other's rename fails)."""
        aside = f"{self.path}.{uuid.uuid4().hex}.broken"
        try:
            os.rename(self.path, aside)
        except OSError:
            return False
        try:
            taken = os.readlink(aside)
        except OSError:  # not a link (a lock of another kind): the grace period ran out
            taken = ""
        if taken != holder:  # it changed hands meanwhile: give it back, never over another
            with contextlib.suppress(OSError):
                os.symlink(taken, self.path)
            with contextlib.suppress(OSError):
                os.unlink(aside)
            return False
        with contextlib.suppress(OSError):
            os.unlink(aside)
        self.broken += 1
        log.warning("broke journal lock '%s' of a process that is gone (%s)", self.path, holder)
        return True


def mend_journal(path: Path) -> str | None:
    """Cut a journal's last line when a process died writing it, keeping the damaged file
    beside it as ``<name>.damaged``; say what was done (None when the file is whole).

    The check runs under the journal's own write lock, so a line another process is writing
    now is never taken for a damaged one.

    Raises:
        AutotuneError: a damaged line before the last (not a cut-off write: the file is not
            a journal this tool can resume).
    """
    if not path.is_file() or not path.stat().st_size:
        return None
    lock = OwnedLock(path)
    lock.acquire()
    try:
        lines = path.read_bytes().split(b"\n")
        body, tail = lines[:-1], lines[-1]  # tail: bytes after the last newline
        bad = [i for i, line in enumerate(body) if not _is_json(line)]  # a blank one too
        if bad and (bad != [len(body) - 1] or tail):
            raise AutotuneError(
                f"storage '{path}': line {bad[0] + 1} of {len(body)} is damaged, not only the "
                "last one; it cannot be resumed: move it aside and start a new study"
            )
        if not bad and (not tail or _is_json(tail)):
            if tail:  # a whole last record without its newline: complete it
                with path.open("ab") as fh:
                    fh.write(b"\n")
            return None
        keep = body[:-1] if bad else body
        backup = path.with_name(path.name + ".damaged")
        shutil.copyfile(path, backup)
        atomic_write_bytes(path, b"".join(line + b"\n" for line in keep))
    finally:
        lock.release()
    return (
        f"storage '{path}': its last line was cut off (a process died writing it); resuming "
        f"from the {len(keep)} lines before it (the damaged file is kept as '{backup.name}')"
    )


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


class BatchedJournalStorage(JournalStorage):
    """Optuna's journal storage, except that the parameters a thread sets inside
    :meth:`batch` go to the file in one append (one lock, one ``fsync``) when the block
    ends: the same records in the same order as one append each, which on a model with 600
    fusion classes cost a second per trial.

    Until the block ends the parameters are in the trial object only (Optuna's trial keeps
    its own copy; a sampler reads finished trials), so another worker sees them a moment
    later, and a worker killed while its trial draws them leaves that trial with none (as
    one killed a moment earlier).

    Raises:
        AutotuneError: (on opening) a line of valid JSON that is no Optuna operation (no or
            an unknown ``op_code``, fields missing), named by its number (``path``).
    """

    def __init__(self, backend: BaseJournalBackend, path: str | os.PathLike[str] = "") -> None:
        self._batch: list[dict[str, Any]] | None = None
        self._batch_thread = 0
        try:  # Optuna replays every record now, and reads a record it cannot apply as a bug
            super().__init__(backend)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, AssertionError):
            line = self._replay_result.log_number_read  # counted before a record is applied
            raise AutotuneError(
                f"storage '{path or 'journal'}': line {line} is not an Optuna journal operation "
                "(valid JSON, but no record Optuna writes); it cannot be resumed: move it aside "
                "and start a new study"
            ) from None

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Hold this thread's :meth:`set_trial_param` records until the block ends (also
        when it raises: what was set is written, as it would have been one by one)."""
        if self._batch is not None:  # nested: the outer block writes
            yield
            return
        self._batch, self._batch_thread = [], threading.get_ident()
        try:
            yield
        finally:
            held, self._batch = self._batch, None
            if held:
                with self._thread_lock:
                    self._backend.append_logs(held)
                    self._sync_with_backend()

    def set_trial_param(
        self,
        trial_id: int,
        param_name: str,
        param_value_internal: float,
        distribution: BaseDistribution,
    ) -> None:
        if self._batch is None or threading.get_ident() != self._batch_thread:
            super().set_trial_param(trial_id, param_name, param_value_internal, distribution)
            return
        self._batch.append(
            {
                "op_code": JournalOperation.SET_TRIAL_PARAM,
                "worker_id": self._replay_result.worker_id,
                "trial_id": trial_id,
                "param_name": param_name,
                "param_value_internal": param_value_internal,
                "distribution": distribution_to_json(distribution),
            }
        )  # the record JournalStorage.set_trial_param writes, key for key


@contextlib.contextmanager
def batched_params(storage: optuna.storages.BaseStorage) -> Iterator[None]:
    """:meth:`BatchedJournalStorage.batch` on such a storage; nothing on any other."""
    if isinstance(storage, BatchedJournalStorage):
        with storage.batch():
            yield
    else:
        yield
