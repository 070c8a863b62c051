"""The tuning loop (docs/tuning.md): an Optuna study over the fusion space, scored by the study's
cost model, the most promising plans measured on the simulator; the best measured plan wins.

Modules: :mod:`.config` (settings), :mod:`.records` (MeasureResult, Candidate, TuneResult),
:mod:`.evaluator` (scoring, measuring, the measure-retrain rows), :mod:`.study` (storage,
sampler, opening a study), :mod:`.search` (local search in the model), :mod:`.pareto`,
:mod:`.session` (the state the steps share), :mod:`.steps` (the named steps),
:mod:`.safety` and :mod:`.safety_codegen` (safe mode: kernel numerics of every measured plan,
the generated code of the output plan), :mod:`.output` (the plan record) and :mod:`.loop`
(:func:`tune_graph`).
"""

from __future__ import annotations

from autotune.tuner.config import OBJECTIVES, TuneConfig
from autotune.tuner.evaluator import COSTS, Evaluator, make_study_model
from autotune.tuner.loop import tune_graph
from autotune.tuner.pareto import knee, picked
from autotune.tuner.records import Candidate, MeasureResult, TuneResult
from autotune.tuner.safety import Safety, make_safety
from autotune.tuner.search import descend, enqueue_neighbours
from autotune.tuner.study import DEFAULT_STORAGE, SAMPLERS, make_sampler, open_storage

__all__ = [
    "COSTS",
    "DEFAULT_STORAGE",
    "OBJECTIVES",
    "SAMPLERS",
    "Candidate",
    "Evaluator",
    "MeasureResult",
    "Safety",
    "TuneConfig",
    "TuneResult",
    "descend",
    "enqueue_neighbours",
    "knee",
    "make_safety",
    "make_sampler",
    "make_study_model",
    "open_storage",
    "picked",
    "tune_graph",
]
