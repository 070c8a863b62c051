"""Progress for whoever is not watching a bar: one line the first time a run enters each
phase (a measurement inside the trials is not told again each time) and one every tenth or
so of a counted job (trials, kernels checked, kernels simulated), on the ``autotune.progress``
logger at INFO, so that a log file, a job under nohup or CI, and a Python caller see where a
long run is.

The CLI shows a bar on a terminal instead (and silences this logger meanwhile,
:mod:`autotune.cli.progress`); elsewhere it prints these lines. An ETA is the job's own pace
so far; no result depends on it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

__all__ = ["LOGGER", "Counter", "Teller", "duration", "every"]

LOGGER = "autotune.progress"
log = logging.getLogger(LOGGER)


def every(total: int) -> int:
    """Units between two progress lines: about ten lines per job, never under one unit."""
    return max(1, math.ceil(total / 10))


def duration(seconds: float) -> str:
    """``1m 05s``, or ``42s`` under a minute."""
    minutes, secs = divmod(max(0, round(seconds)), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


class Counter:
    """``what`` done out of ``total`` (None until known), told every :func:`every` units and
    at the end, with the time left at the pace so far."""

    def __init__(self, what: str, total: int | None = None) -> None:
        self.what, self.total, self.done = what, total, 0
        self._start: float | None = None  # when the first unit was told done
        self._first = 0  # units done at that moment: the pace counts from there
        self._told = 0

    def advance(self, n: int = 1, note: str = "") -> None:
        """``n`` more done; ``note`` is added to a line told now (e.g. the best so far)."""
        now = time.monotonic()
        if self._start is None:
            self._start = now
            self._first = self.done + n
        self.done += n
        total = self.total
        if total is None or (self.done - self._told < every(total) and self.done < total):
            return
        self._told = self.done
        left = total - self.done
        pace = (now - self._start) / (self.done - self._first) if self.done > self._first else 0
        eta = f", about {duration(pace * left)} left" if pace * left >= 1 else ""
        note = f", {note}" if note else ""
        log.info("%s %d/%d%s%s", self.what, self.done, total, note, eta)


class Teller:
    """A study's ``on_phase`` and ``progress`` callbacks (either may be None), each also told
    to the ``autotune.progress`` logger: a line per new phase, one every few trials. The
    set-up is not told: the line that names the study it opened follows it (and a setting
    the set-up refuses stays the one line a user error is)."""

    def __init__(
        self,
        total: int,
        on_phase: Callable[[str], None] | None = None,
        progress: Callable[[int, float], None] | None = None,
    ) -> None:
        self.trials = Counter("trials", total)
        self._on_phase, self._progress = on_phase, progress
        self._seen: set[str] = {"setup"}
        self._start = time.monotonic()

    def phase(self, name: str) -> None:
        if name not in self._seen:
            self._seen.add(name)
            log.info("phase: %s (%s in)", name, duration(time.monotonic() - self._start))
        if self._on_phase is not None:
            self._on_phase(name)

    def trial(self, n: int, best: float) -> None:
        shown = f"{best:.1f} us" if math.isfinite(best) else "-"
        self.trials.advance(n - self.trials.done, f"best predicted {shown}")
        if self._progress is not None:
            self._progress(n, best)
