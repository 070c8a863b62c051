"""Picks on the Pareto front of a two-objective (latency, peak memory) study."""

from __future__ import annotations

from collections.abc import Sequence

import optuna

from autotune.exceptions import AutotuneError

__all__ = ["knee", "picked"]


def knee(front: Sequence[optuna.trial.FrozenTrial]) -> optuna.trial.FrozenTrial:
    """The Pareto point farthest from the line between the two extremes (normalised)."""
    if len(front) <= 2:
        return front[0]
    xs = [t.values[0] for t in front]
    ys = [t.values[1] for t in front]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx, sy = (x1 - x0) or 1.0, (y1 - y0) or 1.0
    a = ((xs[0] - x0) / sx, (ys[0] - y0) / sy)
    b = ((xs[-1] - x0) / sx, (ys[-1] - y0) / sy)

    def dist(t: optuna.trial.FrozenTrial) -> float:
        p = ((t.values[0] - x0) / sx, (t.values[1] - y0) / sy)
        return abs((b[0] - a[0]) * (a[1] - p[1]) - (a[0] - p[0]) * (b[1] - a[1]))

    return max(front, key=dist)


def picked(front: Sequence[optuna.trial.FrozenTrial], number: int) -> optuna.trial.FrozenTrial:
    """The front's trial ``number`` (``--pick``).

    Raises:
        AutotuneError: the trial is not on the front.
    """
    for t in front:
        if t.number == number:
            return t
    raise AutotuneError(
        f"--pick {number} is not on the Pareto front; front trials: "
        f"{', '.join(str(t.number) for t in front)}"
    )
