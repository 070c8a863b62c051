"""The tuning loop (DESIGN §7): an Optuna study over the fusion space, scored by the study's
cost model, the most promising plans measured on the simulator; the best measured plan wins."""

from __future__ import annotations

from autotune.tune.evaluator import COSTS, Evaluator, make_study_model
from autotune.tune.loop import TuneConfig, TuneResult, tune_graph
from autotune.tune.safety import Safety, make_safety
from autotune.tune.study import DEFAULT_STORAGE, SAMPLERS, open_storage

__all__ = [
    "COSTS",
    "DEFAULT_STORAGE",
    "SAMPLERS",
    "Evaluator",
    "Safety",
    "TuneConfig",
    "TuneResult",
    "make_safety",
    "make_study_model",
    "open_storage",
    "tune_graph",
]
