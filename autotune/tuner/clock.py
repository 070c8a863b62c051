"""Where a study's wall time goes: exclusive seconds per phase (a phase inside another pauses
it), so the phases add up to the whole run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Clock"]


class Clock:
    """Exclusive wall time per named phase.

    ``with clock.phase("measurement"): ...`` charges the time inside to ``measurement``; a
    phase entered inside another stops the outer one's clock until it ends. ``listener`` is
    told the phase running now whenever it changes (e.g. a progress bar's label).
    """

    def __init__(self, listener: Callable[[str], None] | None = None) -> None:
        self.listener = listener
        self.spent: dict[str, float] = {}
        self._stack: list[str] = []
        self._since = time.perf_counter()

    def _charge(self) -> None:
        now = time.perf_counter()
        if self._stack:
            name = self._stack[-1]
            self.spent[name] = self.spent.get(name, 0.0) + now - self._since
        self._since = now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._charge()
        self._stack.append(name)
        self._tell()
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()
            self._tell()

    def _tell(self) -> None:
        if self.listener is not None and self._stack:
            self.listener(self._stack[-1])

    def seconds(self) -> dict[str, float]:
        """Seconds per phase so far, rounded to milliseconds, in the order first entered."""
        return {k: round(v, 3) for k, v in self.spent.items()}
