"""Event-driven, cycle-approximate simulator of Ascend AI cores (docs/cost-model.md,
``simulator``).

``SimulatorModel(target)`` runs a plan kernel by kernel, per core and per pipe, tile by tile,
with HBM as a shared fluid resource and an LRU L2 carried across kernels; see
:mod:`costmodel.kernel` for the execution semantics it implements.
"""

from __future__ import annotations

from costmodel.simulator.model import SHORTCUTS, SimulatorModel

__all__ = ["SHORTCUTS", "SimulatorModel"]
