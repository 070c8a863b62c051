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
from scipy.stats import spearmanr

from autotune.exceptions import AutotuneError
from autotune.real.evaluate import RealPrediction

__all__ = ["WITHIN", "metrics", "summarize"]

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
        raise AutotuneError("no real row could be costed (every one failed; see the errors)")
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
