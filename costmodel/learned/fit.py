"""Fitting the learned cost model on calibration tables: the analytic constants first, then
the correction, with its hyperparameters chosen by grouped cross-validation."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from costmodel.analytic import AnalyticConstants, Calibration
from costmodel.exceptions import CostModelError
from costmodel.kernel import PIPES, Kernel
from costmodel.learned.corrector import LatencyCorrector
from costmodel.learned.features import row_features
from costmodel.learned.model import LearnedModel
from costmodel.measure import RowBatches, fit_constants, kernel_from_json, read_table
from costmodel.spec import HardwareSpec, Target, fitted_lineage, load_spec

log = logging.getLogger(__name__)

__all__ = [
    "CANDIDATE_PARAMS",
    "DEFAULT_PARAMS",
    "fit_learned",
    "on_hardware",
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
    hardware_weight: float | None = None,
) -> LearnedModel:
    """Fit the analytic constants, then the correction, on calibration rows.

    Rows measured on hardware (a ``simulator_version`` that is not a simulator's: ``real``,
    ``msprof``) may come from any SKU of the target's chip (``ascend910b4`` rows for
    ``ascend910b``); each is scored on its own spec, and weighs ``hardware_weight`` times a
    simulated row in both fits (default: the hardware rows together weigh as much as the
    simulated ones, or 1 when either kind is missing); the constants are fitted on every
    hardware row and a fixed subsample of the simulated ones.

    Args:
        tables: parquet paths, or a DataFrame of rows (:func:`costmodel.measure.read_table`).
        target: the target the rows were measured on.
        params: corrector hyperparameters (default: the best of :data:`CANDIDATE_PARAMS` by
            :func:`select_params`).
        calibrate: fit the analytic constants first (else keep the target's current ones).

    Raises:
        CostModelError: unreadable tables, or rows of another target.
    """
    frame = tables if hasattr(tables, "columns") else read_table(list(tables))
    specs, weights = _row_specs(frame, target, hardware_weight)
    kernels, resident, measured = table_arrays(frame)
    model = LearnedModel.uncorrected(target)
    cal: Calibration | None = None
    if calibrate:  # the constants are few: a fixed subsample of rows pins them down
        real = on_hardware(frame)
        every = np.flatnonzero(~real)
        sim = every[np.random.default_rng(0).permutation(len(every))[:CALIBRATION_ROWS]]
        pick = np.sort(np.concatenate([np.flatnonzero(real), sim]))
        # the subsample stands for every simulated row: the balance of the two kinds holds
        scale = np.where(real[pick], 1.0, len(every) / max(1, len(sim)))
        cal = fit_constants(
            target.spec,
            RowBatches(
                [kernels[i] for i in pick], [resident[i] for i in pick], [specs[i] for i in pick]
            ),
            measured[pick],
            weights=weights[pick] * scale,
            start=AnalyticConstants(),  # from the spec as written: no earlier fit leaks in
            source="fit_learned",
            pipes={
                p: frame[f"pipe_{p}_us"].to_numpy(dtype=np.float64)[pick]
                for p in PIPES
                if f"pipe_{p}_us" in frame.columns
            },
        )
        model.analytic.constants = cal.constants
    X, analytic = row_features(model.analytic, kernels, resident, specs)
    y = np.log(measured / analytic)
    cv: dict[str, Any] = {}
    if params is None:
        params, cv = select_params(X, y, frame["family"].to_numpy())
    model.base = LatencyCorrector(**params).fit(X, y, sample_weight=weights)
    model.generation += 1
    model.trained_on = {
        "rows": len(kernels),
        "signatures": len(set(frame["signature"])),
        "families": sorted(set(frame["family"])),
        "calibration": cal.to_json() if cal is not None else None,
        **({"selection": cv} if cv else {}),  # the choice itself is the corrector's params
    }
    return model


def on_hardware(frame: Any) -> np.ndarray:
    """Which rows of a table were measured on hardware, not simulated."""
    return ~frame["simulator_version"].astype(str).str.startswith("sim-").to_numpy()


def _row_specs(
    frame: Any, target: Target, hardware_weight: float | None
) -> tuple[list[HardwareSpec | None], np.ndarray]:
    """Each row's own spec (None: the target's) and weight; refuses rows of another chip or
    of a spec that was changed (a ``--set``)."""
    real = on_hardware(frame)
    own = target.spec.name
    specs: list[HardwareSpec | None] = []
    known: dict[str, HardwareSpec] = {own: target.spec}
    for name, digest, hw in zip(frame["target"], frame["spec_digest"], real, strict=True):
        name = str(name)
        if name != own and not (hw and own in fitted_lineage(name)):
            raise CostModelError(
                f"rows were measured on '{name}', not on '{own}' (or, for measurements on "
                "hardware, on a SKU of it); pass tables of one target"
            )
        if name not in known:
            known[name] = load_spec(name)
        if str(digest) != known[name].digest():
            raise CostModelError(
                f"rows were measured on another spec of '{name}' (spec digest {digest}, this "
                f"one is {known[name].digest()}; a --set changes it): calibrate on this spec "
                "first"
            )
        specs.append(None if name == own else known[name])
    if hardware_weight is None:
        n_real = int(real.sum())
        hardware_weight = (len(real) - n_real) / n_real if 0 < n_real < len(real) else 1.0
    if not (np.isfinite(hardware_weight) and hardware_weight > 0):
        raise CostModelError(f"hardware_weight must be > 0, got {hardware_weight}")
    return specs, np.where(real, hardware_weight, 1.0)


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
