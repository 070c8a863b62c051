"""Fitting the analytic model's free constants to measured kernels (least squares).

The residual of a row is ``log(analytic latency) - log(measured latency)``; a weak prior pulls
each constant toward the spec as written (1.0), so a constant the data cannot see stays put.
Rate factors are bounded to at most the spec's peak (a fitted model never runs faster than
the hardware can) and fixed costs to a factor of four either way. Fitted constants are stored
per target in a versioned JSON file that :class:`AnalyticModel` loads by default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from costmodel.analytic import RATES, AnalyticConstants, Calibration, layout, score, stack
from costmodel.exceptions import CostModelError
from costmodel.kernel import PIPES, Kernel, KernelBatch
from costmodel.spec import HardwareSpec

__all__ = ["HELD", "RowBatches", "fit_constants"]

_BOUNDS: dict[str, tuple[float, float]] = {
    **{name: (0.3, 1.0) for name in RATES},
    "l2_capacity": (0.25, 1.0),
    "l2_window": (0.25, 4.0),
    "l2_fill_wait": (0.0, 1.0),
    "share_latency": (0.0, 1.0),
}
_DEFAULT_BOUNDS = (0.25, 4.0)
# Constants fitted only when named. The gap between kernels is the spec's own number, which the
# simulator charges exactly and a device-timed hardware row has added to its duration; it is
# additive like the head and the set-up, so a fit that may move it splits any fixed cost the
# closed form misses between it and them, and the part it takes drops out of ``device_us``
# (the latency less the gap): a tiny kernel's device time came out that much short.
HELD: frozenset[str] = frozenset({"gap"})


class RowBatches:
    """Measured kernels stacked for repeated scoring: kernels of one layout form one batch
    (the closed form reads tensors only through the layout, so this is exact).

    Args:
        kernels: the kernels as run.
        resident: per kernel, the L2-resident fraction of each load stream's tensor.
        specs: per kernel, the spec it ran on when the rows come from several SKUs of one chip
            (real measurements); None: every row runs on the spec :meth:`scores` is given.
    """

    def __init__(
        self,
        kernels: Sequence[Kernel],
        resident: Sequence[Sequence[float]],
        specs: Sequence[HardwareSpec | None] | None = None,
    ) -> None:
        self.n = len(kernels)
        if specs is not None and len(specs) != self.n:
            raise CostModelError(f"{len(specs)} specs for {self.n} rows")
        own = list(specs) if specs is not None else [None] * self.n
        groups: dict[Any, list[int]] = {}
        for i, k in enumerate(kernels):
            groups.setdefault((own[i], layout(k)), []).append(i)
        self.parts: list[tuple[np.ndarray, KernelBatch, list[np.ndarray]]] = []
        self.part_specs: list[HardwareSpec | None] = [key[0] for key in groups]
        for rows in groups.values():
            batch = stack([kernels[i] for i in rows])
            loads = sum(1 for s in batch.streams if s.pipe == "MTE2")
            res = np.zeros((len(rows), loads))
            for n, i in enumerate(rows):
                r = list(resident[i])
                if len(r) != loads:
                    raise CostModelError(
                        f"row {i}: {len(r)} residency values for {loads} load streams"
                    )
                res[n] = r
            self.parts.append((np.asarray(rows), batch, list(res.T)))
        self.flops = np.array([k.flops for k in kernels], dtype=np.float64)
        self.cube_flops = np.array([k.cube_flops for k in kernels], dtype=np.float64)
        self.compulsory = np.array([k.compulsory_bytes for k in kernels], dtype=np.float64)

    def latency(self, spec: HardwareSpec, constants: AnalyticConstants) -> np.ndarray:
        """Analytic latency (us) of every row under ``constants``."""
        return self.scores(spec, constants)[0]

    def scores(
        self, spec: HardwareSpec, constants: AnalyticConstants
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Analytic latency (us) of every row, and each pipe's busy time (us) on the
        busiest core, under ``constants``."""
        out = np.empty(self.n)
        busy = {p: np.empty(self.n) for p in PIPES}
        for (rows, batch, res), own in zip(self.parts, self.part_specs, strict=True):
            part_spec = own or spec
            b = score(part_spec, constants, batch, res)
            out[rows] = b.latency_us
            us = 1e6 / part_spec.clock_hz
            for p in PIPES:
                busy[p][rows] = b.busy[p] * us
        return out, busy


def fit_constants(
    spec: HardwareSpec,
    rows: RowBatches,
    measured: np.ndarray,
    *,
    names: Sequence[str] | None = None,
    prior: float = 0.05,
    start: AnalyticConstants | None = None,
    max_nfev: int = 25,
    source: str = "",
    pipes: Mapping[str, np.ndarray] | None = None,
    weights: np.ndarray | None = None,
) -> Calibration:
    """Least-squares fit of the analytic constants to measured latencies (and, when given,
    to each pipe's measured busy time, which pins the rate factors down directly rather than
    through whatever else a latency misses).

    Args:
        spec: the target the rows were measured on.
        rows: the measured kernels.
        measured: their latencies (us), positive.
        names: constants to fit (default: all but :data:`HELD`).
        prior: weight of the pull of each constant toward the spec as written (its default).
        start: initial constants (default: the spec as written; a held one not named is
            set to the spec's).
        max_nfev: residual evaluations allowed to the optimiser (x number of constants).
        pipes: per pipe (:data:`costmodel.kernel.PIPES`), measured busy times (us) of the
            busiest core, one per row; 0 or NaN where not measured. The pipes' log errors
            over the rows where both sides are busy weigh, together, as much as the
            latency's.
        weights: per row, how much its latency error counts (default 1 each): real
            measurements weighted up against simulated rows.

    Raises:
        CostModelError: no rows, measurements that are not positive and finite, or busy
            times of an unknown pipe or of another row count.
    """
    from scipy.optimize import least_squares

    measured, w = _measurements(rows, measured, weights)
    all_names = [f.name for f in fields(AnalyticConstants)]
    names = list(names or [n for n in all_names if n not in HELD])
    # a held constant not named is the spec's, whatever ``start`` had (an older calibration)
    start = replace(start or AnalyticConstants(), **{n: 1.0 for n in HELD if n not in names})
    space = _Space(names, start.to_json())
    busy = _BusyTimes.of(spec, rows, start, pipes)
    log_meas = np.log(measured)
    residual = _residual(spec, rows, space, log_meas, np.sqrt(w / w.sum()), busy, prior)

    def rmse(c: AnalyticConstants) -> float:
        err = np.log(rows.latency(spec, c)) - log_meas
        return float(np.sqrt(np.sum(w * err**2) / w.sum()))

    before = rmse(start)
    lo, hi = space.bounds()
    result = least_squares(
        residual,
        space.inside(lo, hi),
        bounds=(lo, hi),
        method="trf",
        loss="soft_l1",
        f_scale=0.1 * math.sqrt(float(w[w > 0].mean()) / w.sum()),  # 0.1 of a typical row
        diff_step=1e-3,
        max_nfev=max_nfev * len(names),
    )
    fitted = space.constants(result.x)
    after = rmse(fitted)
    if after > before:  # never ship a fit worse than where it started
        fitted, after = start, before
    return Calibration(spec.name, spec.digest(), fitted, rows.n, before, after, source)


def _measurements(
    rows: RowBatches, measured: np.ndarray, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The measured latencies and the rows' weights, checked.

    Raises:
        CostModelError: not one positive, finite latency per row, or weights that are not
            one finite value >= 0 per row (not all 0).
    """
    measured = np.asarray(measured, dtype=np.float64)
    if rows.n == 0 or len(measured) != rows.n:
        raise CostModelError(f"need one measurement per row, got {len(measured)} for {rows.n}")
    if not np.all(np.isfinite(measured) & (measured > 0)):
        raise CostModelError("measured latencies must be positive and finite")
    w = np.ones(rows.n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (rows.n,) or not np.all(np.isfinite(w) & (w >= 0)) or w.sum() <= 0:
        raise CostModelError(f"need one finite weight >= 0 per row (not all 0) for {rows.n} rows")
    return measured, w


class _Space:
    """The constants a fit moves as the optimiser's parameters: each one's log, or the value
    itself for a constant whose lower bound is 0 (linear: it may be 0); the others stay at
    ``base``."""

    def __init__(self, names: Sequence[str], base: Mapping[str, Any]) -> None:
        self.names = list(names)
        self.base = dict(base)
        self.lin = {n for n in self.names if _BOUNDS.get(n, _DEFAULT_BOUNDS)[0] == 0.0}

    def param(self, name: str, value: float) -> float:
        return value if name in self.lin else math.log(value)

    def constants(self, theta: np.ndarray) -> AnalyticConstants:
        vals = dict(self.base)
        for n, t in zip(self.names, theta, strict=True):
            vals[n] = float(t) if n in self.lin else math.exp(float(t))
        return AnalyticConstants(**vals)

    def spec_theta(self) -> np.ndarray:
        """The spec as written (every constant at its default): where the prior pulls."""
        spec_values = AnalyticConstants().to_json()
        return np.array([self.param(n, spec_values[n]) for n in self.names])

    def bounds(self) -> tuple[list[float], list[float]]:
        lo, hi = [], []
        for n in self.names:
            a, b = _BOUNDS.get(n, _DEFAULT_BOUNDS)
            lo.append(self.param(n, a))
            hi.append(self.param(n, b))
        return lo, hi

    def inside(self, lo: Sequence[float], hi: Sequence[float]) -> np.ndarray:
        """``base`` a little inside the box: at a bound the trust region starts (and stays)
        tiny."""
        margin = [0.02 * (h - low) for low, h in zip(lo, hi, strict=True)]
        return np.array(
            [
                np.clip(self.param(n, self.base[n]), lo[i] + margin[i], hi[i] - margin[i])
                for i, n in enumerate(self.names)
            ]
        )


class _BusyTimes:
    """The measured busy times a fit compares, per pipe: the rows where the pipe is busy on
    both sides (a constant that idles a pipe is never fitted to a pipe's absence), and the
    weight that makes the pipes together weigh as much as the latency."""

    def __init__(self, measured: dict[str, np.ndarray], rows: dict[str, np.ndarray]) -> None:
        self.measured, self.rows = measured, rows
        self.weight = 1.0 / math.sqrt(max(1, sum(k.any() for k in rows.values())))

    @classmethod
    def of(
        cls,
        spec: HardwareSpec,
        rows: RowBatches,
        start: AnalyticConstants,
        pipes: Mapping[str, np.ndarray] | None,
    ) -> _BusyTimes:
        """``pipes``' busy times (0 where NaN or not measured), against the rows' busy times
        under the ``start`` constants.

        Raises:
            CostModelError: a pipe that is not one of :data:`PIPES`, or not one busy time per
                row.
        """
        unknown = sorted(set(pipes or {}) - set(PIPES))
        if unknown:
            raise CostModelError(f"unknown pipe(s) {unknown}; pipes are {', '.join(PIPES)}")
        measured = {
            p: np.nan_to_num(np.asarray(v, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
            for p, v in (pipes or {}).items()
        }
        for p, v in measured.items():
            if v.shape != (rows.n,):
                raise CostModelError(f"pipe {p}: {v.size} busy times for {rows.n} rows")
        start_busy = rows.scores(spec, start)[1]
        busy = {p: (v > 1e-6) & (start_busy[p] > 1e-6) for p, v in measured.items()}
        return cls(measured, busy)


def _residual(
    spec: HardwareSpec,
    rows: RowBatches,
    space: _Space,
    log_meas: np.ndarray,
    row_scale: np.ndarray,
    busy: _BusyTimes,
    prior: float,
) -> Callable[[np.ndarray], np.ndarray]:
    """The residual of a fit: each row's log latency error (scaled by its share of the
    weight, sqrt(w / W)), each pipe's log busy-time errors over its rows, and the prior's
    pull toward the spec as written."""
    theta_spec = space.spec_theta()

    def residual(theta: np.ndarray) -> np.ndarray:
        pred, pipe_busy = rows.scores(spec, space.constants(theta))
        parts = [(np.log(np.maximum(pred, 1e-12)) - log_meas) * row_scale]
        for p, keep in busy.rows.items():
            if keep.any():
                err = np.log(np.maximum(pipe_busy[p][keep], 1e-12)) - np.log(
                    busy.measured[p][keep]
                )
                parts.append(err * busy.weight / math.sqrt(keep.sum()))
        return np.concatenate([*parts, prior * (theta - theta_spec)])

    return residual
