"""Ctrl-C while the command line starts: its imports and the reading of the command line,
before a command runs (:mod:`autotune.__main__` takes Ctrl-C over before any import). Python
would raise KeyboardInterrupt wherever it lands (in an import, or in the CLI framework, which
exits 130 without a word), so until a command starts a Ctrl-C ends the process as one at work
does: one line, ``interrupted``, exit status 130. A command takes Ctrl-C over as it starts
(:func:`command_started`) and handles it as its own."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

__all__ = ["command_started", "starting"]


def _interrupted(signum: int, frame: FrameType | None) -> None:
    """End the process now: nothing is written before a command starts, so there is nothing
    to clean up. An exception would not do: raised inside an extension module's import (the
    CLI's flag callbacks import onnx) it was swallowed by the module's C++ code, so the run
    went on, or it unwound a half-initialised module into a crash at exit (SIGSEGV)."""
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def starting() -> None:
    """Ctrl-C from now on ends the process in one line, exit status 130 (the console
    script's first step, before its imports)."""
    signal.signal(signal.SIGINT, _interrupted)


def command_started() -> None:
    """A command runs: Ctrl-C is a KeyboardInterrupt again, which the command handles (a
    study writes its best plan so far). Nothing when :func:`starting` did not run (a Python
    caller, a test's in-process run)."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)
