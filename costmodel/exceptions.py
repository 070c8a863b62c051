"""Errors of the cost-model package (all derive from the tool-wide base)."""

from __future__ import annotations

from search_space.exceptions import AutofusionError

__all__ = [
    "CostModelError",
    "InfeasibleConfig",
    "MeasurementError",
    "SimulationError",
    "SpecError",
]


class CostModelError(AutofusionError):
    """A cost-model request that cannot be served (unknown model kind, bad artifact...)."""


class SpecError(CostModelError):
    """A hardware spec file or override is invalid."""


class InfeasibleConfig(CostModelError):
    """A kernel config overflows a buffer or breaks a tiling rule."""


class SimulationError(CostModelError):
    """A simulation that cannot finish (a deadlock): the plan fails, not the caller."""


class MeasurementError(CostModelError):
    """Measurements that cannot be read or used: an unreadable profile or real-data CSV, a row
    of it that names no known op, chip or shape, a Dask cluster that cannot be reached."""
