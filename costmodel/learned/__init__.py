"""The learned cost model (docs/cost-model.md): calibrated analytic latency times a correction a
scikit-learn regressor learns from kernel features, saved as JSON trees (never pickle), with
its fit, hyperparameter choice and held-out evaluation."""

from __future__ import annotations

from costmodel.learned.corrector import KINDS, LatencyCorrector
from costmodel.learned.evaluation import (
    METRICS,
    accuracy,
    evaluate_models,
    heldout_split,
    pair_tau,
)
from costmodel.learned.features import FEATURES, kernel_features, per_row, row_features
from costmodel.learned.fit import (
    CANDIDATE_PARAMS,
    DEFAULT_PARAMS,
    fit_learned,
    on_hardware,
    select_params,
    table_arrays,
)
from costmodel.learned.model import BatchTerms, LearnedModel, shipped_model_path

__all__ = [
    "CANDIDATE_PARAMS",
    "DEFAULT_PARAMS",
    "FEATURES",
    "KINDS",
    "METRICS",
    "BatchTerms",
    "LatencyCorrector",
    "LearnedModel",
    "accuracy",
    "evaluate_models",
    "fit_learned",
    "heldout_split",
    "kernel_features",
    "on_hardware",
    "pair_tau",
    "per_row",
    "row_features",
    "select_params",
    "shipped_model_path",
    "table_arrays",
]
