"""The plan report: safe-fusion counts, per-kernel before/after, estimated vs measured."""

from __future__ import annotations

from typing import Any

from search_space.space import FusionPlan

__all__ = ["folded_kernels", "plan_report"]


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


def folded_kernels(plan: FusionPlan, per_kernel: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's kernels with repeated layers folded: the kernels of
    ``per_kernel`` (:func:`plan_report`'s) of one structure (the same kind, tiles,
    latencies, bound and verdict over ops of equal structural hashes, as the
    plan's kernel graph records them; views and constants, which it does not hold, aside)
    are one row with their ``count``, in the order each first appears; a plan without the
    hashes folds nothing. Each row: ``name`` (the first
    kernel's first op, ``+N`` for its other ops), ``count``, ``kind``, ``tiles`` (the config
    in short), ``us_unfused``, ``us``, ``bound`` and ``verdict`` of :func:`plan_report`."""
    graph = plan.meta.get("graph") or {}
    same = dict(zip((n for n, _ in graph.get("ops", [])), graph.get("same", []), strict=False))
    rows: dict[Any, dict[str, Any]] = {}
    # as plan_report reads them: a plan whose kernel rows fall short lists the groups they cover
    for i, (g, k) in enumerate(zip(plan.groups, per_kernel, strict=False)):
        tiles = g.config.short() if g.config else "-"
        shape = tuple(same[n] for n in g.ops if n in same)  # views and constants have none
        us = tuple(round(k[f], 3) if k[f] is not None else None for f in ("us", "us_unfused"))
        key: tuple[Any, ...] = (g.kind, tiles, shape, us, k["bound"], k["verdict"])
        if not shape:
            key = (i,)  # nothing to know it by: not folded
        if key in rows:
            rows[key]["count"] += 1
            continue
        extra = f" +{len(g.ops) - 1}" if len(g.ops) > 1 else ""
        rows[key] = {**k, "name": g.ops[0] + extra, "count": 1, "tiles": tiles}
    return list(rows.values())
