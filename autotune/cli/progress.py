"""A long job's progress in the CLI (``tune``, ``verify``, ``calibrate``, ``report --html``):
on a terminal a bar with its phase, count, elapsed time and ETA that stays when the job ends
(:func:`live_bar`); elsewhere (a log, nohup, CI) the lines of :mod:`autotune.progress` on
stderr."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from autotune.cli.common import err
from autotune.progress import LOGGER, Counter

__all__ = ["Shown", "live_bar", "shown"]

log = logging.getLogger(LOGGER)


@contextlib.contextmanager
def live_bar(*columns: Any) -> Iterator[Any]:
    """A rich ``Progress`` of ``columns`` (then elapsed time and ETA) on stderr that stays
    when it ends; the progress lines are silenced meanwhile, since the bar says them."""
    from rich.progress import Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    lines = logging.getLogger(LOGGER)
    level = lines.level
    lines.setLevel(logging.WARNING)
    tail = (TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    try:
        with Progress(*columns, *tail, console=err) as bar:
            yield bar
    finally:
        lines.setLevel(level)


class Shown:
    """What a job tells: the phase it enters, the total of its counted units, each unit done;
    to its bar, or (``bar`` None) as lines, its phases only where ``phase_lines``."""

    def __init__(
        self, counter: Counter, bar: Any = None, task: Any = None, phase_lines: bool = True
    ) -> None:
        self.counter, self.bar, self.task = counter, bar, task
        self.phase_lines = phase_lines
        self._seen: set[str] = set()

    def phase(self, name: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, phase=name)
        elif self.phase_lines and name not in self._seen:
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
        yield Shown(counter, phase_lines=phase_lines)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    label_column = TextColumn(f"[bold]{label}[/] {{task.fields[phase]}}")
    with live_bar(label_column, BarColumn(), MofNCompleteColumn(), TextColumn(what)) as bar:
        task = bar.add_task(label, total=total, phase="")
        yield Shown(counter, bar, task)
        bar.update(task, phase="done")
