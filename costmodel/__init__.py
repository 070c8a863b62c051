"""costmodel: hardware specs, lowering of a fusion group to a tiled kernel, and the cost models
behind one interface (analytic, simulator, learned), with their calibration.

Subpackages, each importing only those before it: :mod:`~costmodel.lower` (group + config ->
Kernel), :mod:`~costmodel.analytic` (the closed form), :mod:`~costmodel.simulator` (the
event-driven AI-core simulator), :mod:`~costmodel.measure` (real rows, msprof, tables, fits)
and :mod:`~costmodel.learned` (the corrected model). Top-level modules hold the seams:
:mod:`.spec`, :mod:`.kernel`, :mod:`.base` (the ``CostModel`` contract), :mod:`.registry`,
:mod:`.oracle` (per-group configs and costs for the search) and :mod:`.roofline`.
"""

from __future__ import annotations

from costmodel.base import CostModel, KernelCost
from costmodel.exceptions import CostModelError, InfeasibleConfig, SimulationError, SpecError
from costmodel.kernel import Kernel, KernelBatch, Stream
from costmodel.oracle import CostOracle
from costmodel.registry import KINDS, available_cost_models, load_cost_model, make_cost_model
from costmodel.roofline import compulsory_bytes, roofline_us
from costmodel.spec import (
    PRECISIONS,
    HardwareSpec,
    Target,
    available_targets,
    load_spec,
    load_target,
)

__all__ = [
    "KINDS",
    "PRECISIONS",
    "CostModel",
    "CostModelError",
    "CostOracle",
    "HardwareSpec",
    "InfeasibleConfig",
    "Kernel",
    "KernelBatch",
    "KernelCost",
    "SimulationError",
    "SpecError",
    "Stream",
    "Target",
    "available_cost_models",
    "available_targets",
    "compulsory_bytes",
    "load_cost_model",
    "load_spec",
    "load_target",
    "make_cost_model",
    "roofline_us",
]
