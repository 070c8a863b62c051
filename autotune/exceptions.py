"""Errors of the autotune package (all derive from the tool-wide base)."""

from __future__ import annotations

from search_space.atomic import OutputError
from search_space.exceptions import AutofusionError

__all__ = ["AutotuneError", "OutputError", "StorageWriteError"]


class AutotuneError(AutofusionError):
    """A user-facing problem in a tuner, zoo or CLI request."""


class StorageWriteError(BaseException):
    """The study's storage could not be written (a full disk, an I/O error). Not an
    ``Exception``: it must pass through Optuna's and the loop's handlers of a failing trial,
    which would record the trial as failed on the same full disk (and print a traceback); it
    ends the run, and the CLI says it in one line as for an :class:`AutofusionError`."""
