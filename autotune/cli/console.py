"""The CLI's two consoles (stdout, stderr) and what reaches a terminal through them: every
string they print is shown with its control characters escaped (``\\x1b``, ``\\x07``, ``\\r``),
so a model, file, op or tensor name cannot retitle, clear or rewrite the terminal
(docs/reliability.md, "Hostile names"); and the tool's log lines, one plain line each.
"""

from __future__ import annotations

import logging
from typing import Any

from rich.console import Console
from rich.text import Text

from autotune.safe_text import printable

__all__ = ["SafeConsole", "err", "out", "printable", "say_log_lines"]


class SafeConsole(Console):
    """A rich console that escapes control characters in every string it renders: what is
    printed, table cells, titles and headers (all go through :meth:`render_str`)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)


out = SafeConsole(soft_wrap=True)
err = SafeConsole(stderr=True, soft_wrap=True)


class _ErrLines(logging.Handler):
    """What the tool logs (``logging``, the ``autotune`` logger: which study a run opens or
    resumes, a journal mended...), one plain line each on stderr, above a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        err.print(self.format(record), highlight=False, markup=False)


def say_log_lines() -> None:
    """Route what the tool logs to stderr: its warnings, and the progress lines
    (``autotune.progress``: which study a run opens, its phases, every few trials) at INFO;
    once per process (a Python user configures ``logging`` as they like instead)."""
    from autotune.progress import LOGGER

    logger = logging.getLogger("autotune")
    if not any(isinstance(h, _ErrLines) for h in logger.handlers):
        logger.addHandler(_ErrLines())
    logger.setLevel(logging.WARNING)
    logging.getLogger(LOGGER).setLevel(logging.INFO)
