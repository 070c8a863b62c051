"""The closed-form cost model (docs/cost-model.md): per kernel, heads + waves x the slowest pipe
per tile + fill and drain, vectorised over many configs with numpy, with an L2 hit model and its
constants calibrated from simulator runs.

Modules, each importing only those before it: :mod:`.constants` (the free factors and the
shipped calibration), :mod:`.batching` (kernels of one layout stacked), :mod:`.l2` (hit
fractions and plan residency), :mod:`.pipeline` (the closed form over a batch, one wave),
:mod:`.waves` (a short last wave at its own HBM share: :func:`score`) and :mod:`.model`
(:class:`AnalyticModel`, whose docstring gives the formulas).
"""

from __future__ import annotations

from costmodel.analytic.batching import (
    batch_layout,
    batch_of,
    concat,
    layout,
    load_size,
    stack,
    tensor_bytes,
)
from costmodel.analytic.constants import (
    CALIBRATION_SCHEMA,
    RATES,
    AnalyticConstants,
    Calibration,
    calibrated_constants,
    load_calibration,
    shipped_calibration_path,
)
from costmodel.analytic.l2 import L2Residency
from costmodel.analytic.model import AnalyticModel, L2Touches, l2_touches
from costmodel.analytic.pipeline import Breakdown, bound
from costmodel.analytic.waves import score

__all__ = [
    "CALIBRATION_SCHEMA",
    "RATES",
    "AnalyticConstants",
    "AnalyticModel",
    "Breakdown",
    "Calibration",
    "L2Residency",
    "L2Touches",
    "batch_layout",
    "batch_of",
    "bound",
    "calibrated_constants",
    "concat",
    "l2_touches",
    "layout",
    "load_calibration",
    "load_size",
    "score",
    "shipped_calibration_path",
    "stack",
    "tensor_bytes",
]
