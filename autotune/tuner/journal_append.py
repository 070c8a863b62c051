"""Appending to a study's journal file so that a write that fails (a full disk, an I/O
error) leaves the journal as it was: the records of one append are written whole or the file
is cut back to its length before them, and the failure ends the run with one clear error
(:class:`~autotune.exceptions.StorageWriteError`), not a half line the next run would have to
mend; a trial it interrupts stays RUNNING, reaped and retried on the next run as a dead
worker's."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import get_lock_file

from autotune.exceptions import StorageWriteError

__all__ = ["WholeAppendBackend"]


class WholeAppendBackend(JournalFileBackend):
    """Optuna's journal file backend whose appends are whole or undone."""

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode()
        with get_lock_file(self._lock):
            size = os.path.getsize(self._file_path) if os.path.exists(self._file_path) else 0
            try:
                with open(self._file_path, "ab") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                _cut_back(self._file_path, size)
                raise StorageWriteError(
                    f"cannot write the study's storage '{self._file_path}': {exc.strerror} "
                    "(the journal is left as it was); free some space, then run again to resume"
                ) from None


def _cut_back(path: str, size: int) -> None:
    """Cut the file back to ``size`` bytes (the records before the failed append)."""
    with contextlib.suppress(OSError):  # else the next run mends a cut-off last line
        os.truncate(path, size)
