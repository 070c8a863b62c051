"""The plan report: safe-fusion counts, per-kernel before/after, estimated vs measured."""

from __future__ import annotations

from typing import Any

from search_space.space import FusionPlan

__all__ = ["plan_report"]


def plan_report(plan: FusionPlan) -> dict[str, Any]:
    """What ``autotune report PLAN --json`` prints, from the plan file alone."""
    meta = dict(plan.meta)
    rows = meta.get("kernels") or [{} for _ in plan.groups]
    kernels = []
    for g, row in zip(plan.groups, rows, strict=False):
        kernels.append(
            {
                "ops": list(g.ops),
                "kind": g.kind,
                "config": g.config.to_json() if g.config else None,
                "us_unfused": row.get("us_unfused"),
                "us": row.get("us"),
                "bound": row.get("bound", ""),
                "footprint": row.get("footprint", {}),
                "verdict": g.verdict or ("fused" if len(g.ops) > 1 else "single"),
            }
        )
    base = meta.get("baseline_us", {})
    counts = dict(meta.get("report", {}))
    counts.setdefault("fused", sum(1 for g in plan.groups if len(g.ops) > 1))
    out: dict[str, Any] = {
        "model": plan.name,
        "target": plan.target,
        "precision": plan.precision,
        "kernels": len(plan.groups),
        "predicted_us": plan.predicted_us,
        "measured_us": plan.measured_us,
        "baseline_us": base,
        "safe_fusion": counts,
        "per_kernel": kernels,
        "study": meta.get("study"),
        "trials": meta.get("trials"),
    }
    if plan.measured_us and base.get("none"):
        out["speedup_vs_none_measured"] = base["none"] / plan.measured_us
    if plan.measured_us and base.get("greedy"):
        out["speedup_vs_greedy_measured"] = base["greedy"] / plan.measured_us
    predicted = meta.get("baseline_predicted_us", {})
    if plan.predicted_us and predicted.get("none"):
        out["speedup_vs_none_estimated"] = predicted["none"] / plan.predicted_us
    return out
