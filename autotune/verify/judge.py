"""Safe mode's judgement of one fused kernel (docs/verification.md, level 2): how far each
output is from the float64 reference, and whether fusion added the error."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.verify.numerics import f64
from search_space.rules import Policy

__all__ = ["Errors", "Judgement", "compare", "judge"]

MASKED = -1e30  # reference scores at or below this are masked (-inf or the float minimum)
REL_FLOOR = 5e-2  # rel error = |d| / (|ref| + REL_FLOOR * max|ref|)
ABS_FLOOR = 1e-6  # fused error within error_factor x unfused error + this (x max|ref|)
COS_FLOOR = 1e-6  # fused 1 - cosine within error_factor x the unfused one + this


@dataclass(frozen=True)
class Errors:
    """How far one output is from the reference (masked entries left out)."""

    cosine: float
    max_abs: float
    max_rel: float
    finite: bool
    scale: float
    masks_kept: bool = True


def compare(ref: np.ndarray, got: np.ndarray) -> Errors:
    """Cosine, max abs and floored max rel error of ``got`` against ``ref``.

    Entries the reference masks (-inf or <= -1e30, as attention masks do) are compared only
    for staying masked; everything else must be finite.
    """
    r, x = f64(ref).reshape(-1), f64(got).reshape(-1)
    masked = (r <= MASKED) | np.isneginf(r)
    kept = bool(np.all((x[masked] <= -1e4) | np.isneginf(x[masked])))
    r, x = r[~masked], x[~masked]
    finite = bool(np.all(np.isfinite(x))) and kept
    if not r.size:
        return Errors(1.0, 0.0, 0.0, finite, 0.0, kept)
    with np.errstate(all="ignore"):
        d = np.abs(x - r)
        scale = float(np.max(np.abs(r)))
        nr, nx = float(np.linalg.norm(r)), float(np.linalg.norm(x))
        cos = 1.0 if nr == nx == 0 else float(np.dot(r, x) / (nr * nx)) if nr and nx else 0.0
        rel = d / (np.abs(r) + REL_FLOOR * scale + 1e-30)
        max_abs = float(np.max(d)) if finite else math.inf
        max_rel = float(np.max(rel)) if finite else math.inf
    if not math.isfinite(cos):
        cos = 0.0
    return Errors(cos, max_abs, max_rel, finite, scale, kept)


@dataclass(frozen=True)
class Judgement:
    """Whether a fused kernel failed, its verdict text, and the worst errors over its outputs
    (the fused kernel's and the unfused ops', against the same reference)."""

    failed: bool
    verdict: str
    cosine: float
    max_abs: float
    max_rel: float
    unfused_max_abs: float
    unfused_cosine: float


def judge(fused: dict[str, Errors], unfused: dict[str, Errors], policy: Policy) -> Judgement:
    """Judge one fused kernel from each output's errors, fused and unfused.

    A fused kernel fails when it alone is wrong (a non-finite output or a lost mask where the
    unfused ops stay finite), or when it is beyond a threshold (``cosine_min``,
    ``max_abs_err``, ``max_rel_err``) *and* fusion added the error: some output errs more than
    ``error_factor`` times what the unfused ops err on it at the same precision. A kernel
    beyond a threshold only as far as the unfused ops are passes, with both errors noted:
    unfusing it would cost time and buy no accuracy.
    """
    cos = min((e.cosine for e in fused.values()), default=1.0)
    mabs = max((e.max_abs for e in fused.values()), default=0.0)
    mrel = max((e.max_rel for e in fused.values()), default=0.0)
    uabs = max((e.max_abs for e in unfused.values()), default=0.0)
    ucos = min((e.cosine for e in unfused.values()), default=1.0)
    alone = [
        f"masked scores lost their mask in {t}" if not e.masks_kept else f"non-finite output {t}"
        for t, e in fused.items()
        if not e.finite and unfused[t].finite
    ]
    beyond = []
    if cos < policy.cosine_min:
        beyond.append(f"cosine {cos:.6f} < {policy.cosine_min}")
    if mabs > policy.max_abs_err:
        beyond.append(f"max abs err {mabs:.3g} > {policy.max_abs_err}")
    if mrel > policy.max_rel_err:
        beyond.append(f"max rel err {mrel:.3g} > {policy.max_rel_err}")
    added = []
    for t, e in fused.items():
        u = unfused[t]
        if not e.finite:
            continue
        allowed = policy.error_factor * u.max_abs + ABS_FLOOR * max(e.scale, 1.0)
        if e.max_abs > allowed:
            added.append(
                f"{t}: fused error {e.max_abs:.3g} > {policy.error_factor:g} x unfused "
                f"{u.max_abs:.3g}"
            )
        elif 1.0 - e.cosine > policy.error_factor * (1.0 - u.cosine) + COS_FLOOR:
            added.append(f"{t}: fused cosine {e.cosine:.6f} against unfused {u.cosine:.6f}")
    failed = bool(alone or (beyond and added))
    if failed:
        verdict = "fail: " + "; ".join(alone + (beyond + added if added else []))
    elif beyond:
        verdict = (
            f"ok (as the unfused ops: {'; '.join(beyond)}; unfused cosine {ucos:.6f}, "
            f"max abs err {uabs:.3g})"
        )
    else:
        verdict = "ok"
    return Judgement(failed, verdict, cos, mabs, mrel, uabs, ucos)
