"""How close the cost models come to real measured kernel times (:mod:`.evaluate` costs them).

Metrics, per group of rows and overall: the geometric mean of predicted / real, the median of
``|ln(predicted / real)|``, the share of rows within 25% (``|ln ratio| <= ln 1.25``) and the
Spearman rank correlation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import kendalltau, spearmanr

from costmodel.exceptions import MeasurementError
from costmodel.measure.real.evaluate import CUBE_TILES, RealPrediction

__all__ = ["WITHIN", "config_ranking", "metrics", "summarize"]

WITHIN = math.log(1.25)


def metrics(pred: Sequence[float], real: Sequence[float]) -> dict[str, float | int | None]:
    """Geomean of pred/real, median |ln(pred/real)|, share within 25%, Spearman."""
    p, r = np.asarray(pred, float), np.asarray(real, float)
    keep = np.isfinite(p) & (p > 0) & (r > 0)
    p, r = p[keep], r[keep]
    if not len(p):
        return {
            "n": 0,
            "geomean": None,
            "median_abs_log": None,
            "within_25": None,
            "spearman": None,
        }
    lr = np.log(p / r)
    rho = None
    if len(p) >= 3 and np.ptp(r) > 0 and np.ptp(p) > 0:
        rho = float(spearmanr(p, r).statistic)
    return {
        "n": len(p),
        "geomean": float(np.exp(lr.mean())),
        "median_abs_log": float(np.median(np.abs(lr))),
        "within_25": float(np.mean(np.abs(lr) <= WITHIN + 1e-12)),
        "spearman": rho,
    }


def summarize(
    predictions: Sequence[RealPrediction],
    by: Sequence[str] = ("source", "family", "chip", "impl", "context"),
) -> dict[str, Any]:
    """Metrics per model, overall and per value of each key in ``by`` and per combination."""
    ok = [p for p in predictions if not p.error]
    if not ok:
        raise MeasurementError("no real row could be costed (every one failed; see the errors)")
    names = sorted({k for p in ok for k in p.predicted})

    def block(preds: Sequence[RealPrediction]) -> dict[str, Any]:
        real = [p.row.time_us for p in preds]
        return {m: metrics([p.predicted.get(m, math.nan) for p in preds], real) for m in names}

    def key_of(p: RealPrediction, k: str) -> str:
        r = p.row
        keys = {"source": r.source_name, "family": r.family, "chip": r.target}
        return {**keys, "timing": r.timing, "impl": r.impl, "context": r.context}[k]

    out: dict[str, Any] = {"rows": len(predictions), "costed": len(ok), "overall": block(ok)}
    for timing in ("device", "host"):
        sub = [p for p in ok if p.row.timing == timing]
        if sub:
            out[f"overall_{timing}"] = block(sub)
    for k in by:
        groups: dict[str, list[RealPrediction]] = {}
        for p in ok:
            groups.setdefault(key_of(p, k), []).append(p)
        out[f"by_{k}"] = {v: block(g) for v, g in sorted(groups.items())}
    combos: dict[tuple[str, ...], list[RealPrediction]] = {}
    for p in ok:
        combos.setdefault(tuple(key_of(p, k) for k in by), []).append(p)
    out["by_group"] = [
        {**dict(zip(by, key, strict=True)), **block(g)} for key, g in sorted(combos.items())
    ]
    return out


def config_ranking(predictions: Sequence[RealPrediction], model: str) -> dict[str, Any]:
    """How well ``model`` (a key of ``predicted``, e.g. ``simulator/default``) ranks the tile
    configs one kernel was timed under: per kernel (same source, implementation, op,
    shapes, dtype and chip)
    timed under two or more configs the cost model can express (a GEMM's L1 and L0 tiles),
    the Kendall tau of predicted against measured times (0 where the model cannot tell them
    apart); and their mean."""
    groups: dict[tuple[Any, ...], list[RealPrediction]] = {}
    for p in predictions:
        tiles = tuple(sorted((k, v) for k, v in p.row.tiling.items() if k in CUBE_TILES))
        if p.error or not tiles:
            continue
        r = p.row
        key = (r.source_name, r.impl, r.op, tuple(r.tensors.items()), r.dtype, r.target)
        groups.setdefault(key, []).append(p)
    taus = []
    for preds in groups.values():
        if len({tuple(sorted(p.row.tiling.items())) for p in preds}) < 2:
            continue
        tau = kendalltau([p.predicted[model] for p in preds], [p.row.time_us for p in preds])
        # a model that puts every config at one time ranks them no better than chance: 0
        taus.append(
            {
                "op": preds[0].row.op,
                "rows": [p.row.row for p in preds],
                "tau": float(np.nan_to_num(tau.statistic)),
            }
        )
    mean = float(np.mean([t["tau"] for t in taus])) if taus else None
    return {"n_kernels": len(taus), "mean_tau": mean, "kernels": taus}
