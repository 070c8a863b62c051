"""Held-out accuracy of the cost models against measured (simulated) kernels.

The split is by model family, then by signature: test rows come only from held-out families
and only from kernels whose signature (op structure + shapes) never occurs in training.
Ranking metrics are computed within a *group* (configs of one kernel in one context), the
choice the tuner actually makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from costmodel.analytic import AnalyticConstants
from costmodel.exceptions import CostModelError
from costmodel.learned.corrector import LatencyCorrector
from costmodel.learned.features import row_features
from costmodel.learned.fit import DEFAULT_PARAMS, fit_learned, table_arrays
from costmodel.learned.model import LearnedModel
from costmodel.measure import RowBatches
from costmodel.spec import Target

__all__ = ["METRICS", "accuracy", "evaluate_models", "heldout_split", "pair_tau"]

METRICS = ("mape", "median_rel_err", "p90_rel_err", "spearman", "kendall_tau", "top1_regret")
TIE = 0.03  # config pairs closer than this (relative) are not ranked


def heldout_split(
    frame: pd.DataFrame, test_families: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train on every other family; test on the held-out families' rows whose signature no
    training row has.

    Raises:
        CostModelError: a named family is not in the table, or a side ends up empty.
    """
    families = set(frame["family"])
    unknown = sorted(set(test_families) - families)
    if unknown:
        raise CostModelError(
            f"held-out famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} not in "
            f"the table; it has {', '.join(sorted(families))}"
        )
    is_test = frame["family"].isin(list(test_families))
    train = frame[~is_test]
    test = frame[is_test & ~frame["signature"].isin(set(train["signature"]))]
    if train.empty or test.empty:
        raise CostModelError(
            f"the split leaves {len(train)} training and {len(test)} test rows; hold out "
            "fewer or other families"
        )
    return train.reset_index(drop=True), test.reset_index(drop=True)


def pair_tau(pred: np.ndarray, true: np.ndarray, tie: float = TIE) -> float | None:
    """Kendall tau over the pairs whose true values differ by more than ``tie`` (relative):
    (concordant - discordant) / pairs; None when no pair qualifies."""
    i, j = np.triu_indices(len(true), 1)
    lo = np.minimum(true[i], true[j])
    keep = np.abs(true[i] - true[j]) > tie * lo
    if not keep.any():
        return None
    s = np.sign(pred[i][keep] - pred[j][keep]) * np.sign(true[i][keep] - true[j][keep])
    return float(s.mean())


def accuracy(pred: np.ndarray, true: np.ndarray, groups: Sequence[Any]) -> dict[str, float]:
    """The metrics of :data:`METRICS` (fractions), plus how many groups were ranked."""
    pred, true = np.asarray(pred, float), np.asarray(true, float)
    rel = np.abs(pred - true) / true
    taus, regrets = [], []
    frame = pd.DataFrame({"g": list(groups), "p": pred, "t": true})
    for _, part in frame.groupby("g", sort=False):
        if len(part) < 2:
            continue
        p, t = part["p"].to_numpy(), part["t"].to_numpy()
        tau = pair_tau(p, t)
        if tau is not None:
            taus.append(tau)
        regrets.append(float(t[int(np.argmin(p))] / t.min() - 1.0))
    rho = spearmanr(pred, true).statistic if len(true) > 1 else float("nan")
    return {
        "mape": float(rel.mean()),
        "median_rel_err": float(np.median(rel)),
        "p90_rel_err": float(np.percentile(rel, 90)),
        "spearman": float(rho),
        "kendall_tau": float(np.mean(taus)) if taus else float("nan"),
        "top1_regret": float(np.mean(regrets)) if regrets else float("nan"),
        "groups_ranked": len(taus),
    }


def evaluate_models(
    frame: pd.DataFrame,
    target: Target,
    test_families: Sequence[str],
    *,
    params: dict[str, Any] | None = None,
    compare: Sequence[str] = (),
    keep_rows: bool = False,
) -> dict[str, Any]:
    """Fit on the training side, score the held-out side with the raw analytic model, the
    calibrated analytic model and the learned model.

    Args:
        compare: other corrector kinds (``forest``, ``ridge``) to score as ``learned_<kind>``,
            on the same calibration and features.
        keep_rows: also return the test rows with each model's prediction (``test``: a
            DataFrame with ``pred_analytic``, ``pred_calibrated``, ``pred_learned``), to break
            the errors down.

    Returns:
        ``{"analytic": {...}, "calibrated": {...}, "learned": {...}, "rows": {...}}``.
    """
    train, test = heldout_split(frame, test_families)
    learned: LearnedModel = fit_learned(train, target, params=params)
    kernels, resident, measured = table_arrays(test)
    rows = RowBatches(kernels, resident)
    raw = rows.latency(target.spec, AnalyticConstants())
    X, calibrated = row_features(learned.analytic, kernels, resident)
    corrected = calibrated * np.exp(learned._correction(X))
    groups = list(test["group_id"])
    warm = np.array([any(r) for r in resident], dtype=bool)
    others = {}
    if compare:
        ktr, rtr, mtr = table_arrays(train)
        Xtr, atr = row_features(learned.analytic, ktr, rtr)
        for kind in compare:
            est = LatencyCorrector(**{**(params or DEFAULT_PARAMS), "kind": kind})
            est.fit(Xtr, np.log(mtr / atr))
            others[f"learned_{kind}"] = accuracy(
                calibrated * np.exp(est.predict(X)), measured, groups
            )
    return {
        "analytic": accuracy(raw, measured, groups),
        "calibrated": accuracy(calibrated, measured, groups),
        "learned": accuracy(corrected, measured, groups),
        **others,
        "rows": {
            "train": len(train),
            "test": len(test),
            "train_signatures": int(train["signature"].nunique()),
            "test_signatures": int(test["signature"].nunique()),
            "test_families": list(test_families),
            "test_warm": int(warm.sum()),
        },
        # rows run after their plan's previous kernels (inputs in L2), as a study measures
        "warm_mape": {
            name: float(np.mean(np.abs(pred[warm] / measured[warm] - 1.0))) if warm.any() else None
            for name, pred in zip(
                ("analytic", "calibrated", "learned"), (raw, calibrated, corrected), strict=True
            )
        },
        "constants": learned.analytic.constants.to_json(),
        **(
            {
                "test": test.assign(
                    pred_analytic=raw, pred_calibrated=calibrated, pred_learned=corrected
                )
            }
            if keep_rows
            else {}
        ),
    }
