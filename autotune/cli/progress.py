"""A long job's progress in the CLI (``verify``, ``calibrate``): on a terminal a bar with its
phase, count, elapsed time and ETA that stays when the job ends; elsewhere (a log, nohup, CI)
the lines of :mod:`autotune.progress` on stderr."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from autotune.cli.common import err
from autotune.progress import LOGGER, Counter

__all__ = ["Shown", "shown"]

log = logging.getLogger(LOGGER)


class Shown:
    """What a job tells: the phase it enters, the total of its counted units, each unit done."""

    def __init__(
        self, counter: Counter, bar: Any = None, task: Any = None, lines: bool = True
    ) -> None:
        self.counter, self.bar, self.task = counter, bar, task
        self._seen: set[str] = set() if lines else {""}

    def phase(self, name: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, phase=name)
        elif name not in self._seen and "" not in self._seen:
            log.info("phase: %s", name)
        self._seen.add(name)

    def total(self, n: int) -> None:
        self.counter.total = n
        if self.bar is not None:
            self.bar.update(self.task, total=n)

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)
        else:
            self.counter.advance(n)


@contextlib.contextmanager
def shown(
    label: str, what: str, total: int | None = None, phase_lines: bool = True
) -> Iterator[Shown]:
    """Progress of a job named ``label`` counting ``what`` (``kernels checked``); off a
    terminal, ``phase_lines`` False leaves the phases to the bar (a job whose count says it)."""
    counter = Counter(what, total)
    if not err.is_terminal:
        yield Shown(counter, lines=phase_lines)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn(f"[bold]{label}[/] {{task.fields[phase]}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(what),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    lines = logging.getLogger(LOGGER)  # the bar says what these lines would
    level = lines.level
    lines.setLevel(logging.WARNING)
    try:
        with Progress(*columns, console=err) as bar:
            task = bar.add_task(label, total=total, phase="")
            yield Shown(counter, bar, task)
            bar.update(task, phase="done")
    finally:
        lines.setLevel(level)
