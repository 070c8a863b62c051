"""Fitting the learned cost model on calibration tables: the analytic constants first, then
the correction, with its hyperparameters chosen by grouped cross-validation."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from costmodel.analytic import AnalyticConstants, Calibration
from costmodel.calibration import RowBatches, fit_constants, kernel_from_json, read_table
from costmodel.exceptions import CostModelError
from costmodel.kernel import PIPES, Kernel
from costmodel.learned.corrector import LatencyCorrector
from costmodel.learned.features import row_features
from costmodel.learned.model import LearnedModel
from costmodel.spec import Target

log = logging.getLogger(__name__)

__all__ = [
    "CANDIDATE_PARAMS",
    "DEFAULT_PARAMS",
    "fit_learned",
    "select_params",
    "table_arrays",
]

CANDIDATE_PARAMS: tuple[dict[str, Any], ...] = (
    {
        "kind": "hgb",
        "max_iter": 150,
        "learning_rate": 0.1,
        "max_leaf_nodes": 15,
        "min_samples_leaf": 8,
        "l2_regularization": 1.0,
    },
    {
        "kind": "hgb",
        "max_iter": 100,
        "learning_rate": 0.1,
        "max_leaf_nodes": 63,
        "min_samples_leaf": 4,
        "l2_regularization": 1.0,
    },
)  # smallest first: a bigger one must beat the choice by SELECT_MARGIN
SELECT_MARGIN = 0.02
DEFAULT_PARAMS: dict[str, Any] = CANDIDATE_PARAMS[0]  # also the comparison kinds' settings
CALIBRATION_ROWS = 2000


def table_arrays(frame: Any) -> tuple[list[Kernel], list[list[float]], np.ndarray]:
    """Kernels, residencies and measured latencies of a calibration table's rows."""
    kernels = [kernel_from_json(json.loads(k)) for k in frame["kernel"]]
    resident = [json.loads(r) for r in frame["resident"]]
    return kernels, resident, frame["latency_us"].to_numpy(dtype=np.float64)


def fit_learned(
    tables: Any,
    target: Target,
    *,
    params: Mapping[str, Any] | None = None,
    calibrate: bool = True,
) -> LearnedModel:
    """Fit the analytic constants, then the correction, on calibration rows.

    Args:
        tables: parquet paths, or a DataFrame of rows (:func:`costmodel.calibration.read_table`).
        target: the target the rows were measured on.
        params: corrector hyperparameters (default: the best of :data:`CANDIDATE_PARAMS` by
            :func:`select_params`).
        calibrate: fit the analytic constants first (else keep the target's current ones).

    Raises:
        CostModelError: unreadable tables, or rows of another target.
    """
    frame = tables if hasattr(tables, "columns") else read_table(list(tables))
    names = set(frame["target"])
    if names != {target.spec.name}:
        raise CostModelError(
            f"rows were measured on {sorted(names)}, not on '{target.spec.name}'; "
            "pass tables of one target"
        )
    digests = set(frame["spec_digest"]) - {target.spec.digest()}
    if digests:
        raise CostModelError(
            f"rows were measured on another spec of '{target.spec.name}' (spec digest "
            f"{sorted(digests)}, this one is {target.spec.digest()}; a --set changes it): "
            "calibrate on this spec first"
        )
    kernels, resident, measured = table_arrays(frame)
    model = LearnedModel.uncorrected(target)
    cal: Calibration | None = None
    if calibrate:  # the constants are few: a fixed subsample of rows pins them down
        pick = np.random.default_rng(0).permutation(len(kernels))[:CALIBRATION_ROWS]
        cal = fit_constants(
            target.spec,
            RowBatches([kernels[i] for i in pick], [resident[i] for i in pick]),
            measured[pick],
            start=AnalyticConstants(),  # from the spec as written: no earlier fit leaks in
            source="fit_learned",
            pipes={
                p: frame[f"pipe_{p}_us"].to_numpy(dtype=np.float64)[pick]
                for p in PIPES
                if f"pipe_{p}_us" in frame.columns
            },
        )
        model.analytic.constants = cal.constants
    X, analytic = row_features(model.analytic, kernels, resident)
    y = np.log(measured / analytic)
    cv: dict[str, Any] = {}
    if params is None:
        params, cv = select_params(X, y, frame["family"].to_numpy())
    model.base = LatencyCorrector(**params).fit(X, y)
    model.generation += 1
    model.trained_on = {
        "rows": len(kernels),
        "signatures": len(set(frame["signature"])),
        "families": sorted(set(frame["family"])),
        "calibration": cal.to_json() if cal is not None else None,
        **({"selection": cv} if cv else {}),  # the choice itself is the corrector's params
    }
    return model


def _latency_mape(log_ratio: np.ndarray, predicted: np.ndarray) -> float:
    """Mean relative latency error of predicted log ratios (analytic x exp(ratio))."""
    return float(np.mean(np.abs(np.expm1(np.asarray(predicted) - np.asarray(log_ratio)))))


def select_params(
    X: np.ndarray,
    y: np.ndarray,
    families: np.ndarray,
    candidates: Sequence[Mapping[str, Any]] = CANDIDATE_PARAMS,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The corrector hyperparameters that predict held-out families best, and the scores.

    Each candidate (smallest first) is cross-validated with whole model families held out in
    turn (signatures two families share are not removed, unlike the held-out evaluation); its
    score is the mean over folds of the latency MAPE. A later, bigger candidate replaces the
    choice only if it beats it by more than ``SELECT_MARGIN`` (relative): bigger trees cost
    file size and prediction time. Fewer than three families: the first candidate.

    Returns:
        The chosen parameters and ``{"folds", "mape"}`` (one score per candidate, in order;
        empty when nothing was compared).

    Raises:
        ValueError: a candidate's parameters fail to fit (never chosen silently).
    """
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GridSearchCV, GroupKFold

    families = np.asarray(families).astype(str)
    n = len(set(families))
    if n < 3 or len(candidates) < 2:
        return dict(candidates[0]), {}
    folds = min(4, n)
    search = GridSearchCV(
        LatencyCorrector(),
        [{k: [v] for k, v in c.items()} for c in candidates],
        scoring=make_scorer(_latency_mape, greater_is_better=False),
        cv=GroupKFold(n_splits=folds),
        refit=False,
        error_score="raise",
    ).fit(X, y, groups=families)
    scores = [-float(s) for s in search.cv_results_["mean_test_score"]]
    best = 0
    for i, score in enumerate(scores):
        if score < scores[best] * (1.0 - SELECT_MARGIN):
            best = i
    log.info("corrector candidates, fold MAPE %s: chose %s", scores, candidates[best])
    return dict(candidates[best]), {"folds": folds, "mape": [round(x, 5) for x in scores]}
