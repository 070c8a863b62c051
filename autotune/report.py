"""The plan report: its one latency, safe mode's counts, per-kernel before/after, predicted
vs simulated."""

from __future__ import annotations

from typing import Any

from autotune.plan_file import migrate_meta
from autotune.vocabulary import plan_latency, schema
from search_space.space import FusionPlan

__all__ = ["folded_kernels", "plan_report"]


def plan_report(plan: FusionPlan) -> dict[str, Any]:
    """What ``autotune report PLAN --json`` prints and ``Plan.report()`` returns, from the
    plan file alone (``docs/json.md``: the document ``autotune.report``)."""
    meta = migrate_meta(plan.meta)  # a record built from a version 1 file by hand reads the same
    rows = meta.get("kernels") or [{} for _ in plan.groups]
    kernels = [
        {
            "name": g.name,
            "ops": list(g.ops),
            "kind": g.kind,
            "config": g.config.to_json() if g.config else None,
            "unfused_predicted_us": row.get("unfused_predicted_us"),
            "predicted_us": row.get("predicted_us"),
            "simulated_us": row.get("simulated_us"),
            "bound": row.get("bound", ""),
            "footprint": row.get("footprint", {}),
            "verdict": g.verdict or ("fused" if len(g.ops) > 1 else "single"),
        }
        for g, row in zip(plan.groups, rows, strict=False)
    ]
    simulated = meta.get("baseline_simulated_us", {})
    counts = dict(meta.get("safe_mode", {}))
    counts.setdefault("fused", sum(1 for g in plan.groups if len(g.ops) > 1))
    out: dict[str, Any] = {
        "schema": schema("report"),
        "latency": plan_latency(plan.predicted_us, plan.measured_us, plan.cost_model),
        "model": plan.name,
        "target": plan.target,
        "precision": plan.precision,
        "cost_model": plan.cost_model,
        "n_kernels": len(plan.groups),
        "predicted_us": plan.predicted_us,
        "simulated_us": plan.measured_us,
        "baseline_simulated_us": simulated,
        "safe_mode": counts,
        "kernels": kernels,
        "study": meta.get("study"),
        "trials": meta.get("trials"),
    }
    if plan.buckets:  # a plan over shape ranges: each bucket's figures (the kernels: the top's)
        out["shape_ranges"] = list(plan.shape_ranges)
        out["buckets"] = [
            {k: v for k, v in b.to_json().items() if k != "configs"} for b in plan.buckets
        ]
    predicted = meta.get("baseline_predicted_us", {})
    for base, mine, kind in (
        (simulated, plan.measured_us, "simulated"),
        (predicted, plan.predicted_us, "predicted"),
    ):
        for name in ("none", "greedy"):
            if mine and base.get(name):
                out[f"speedup_vs_{name}_{kind}"] = base[name] / mine
    return out


def folded_kernels(plan: FusionPlan, per_kernel: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's kernels with repeated layers folded: the kernels of ``per_kernel``
    (:func:`plan_report`'s) of one structure (the same kind, tiles, latencies, bound and
    verdict over ops of equal structural hashes, as the plan's kernel graph records them;
    views and constants, which it does not hold, aside) are one row with their ``count``, in
    the order each first appears; a plan without the hashes folds nothing. Each row:
    ``name`` (the first kernel's name, or in a plan without names its first op, ``+N`` for
    its other ops), ``count``, ``kind``, ``tiles`` (the config in short),
    ``unfused_predicted_us``, ``simulated_us``, ``bound`` and ``verdict`` of
    :func:`plan_report`."""
    graph = plan.meta.get("graph") or {}
    same = dict(zip((n for n, _ in graph.get("ops", [])), graph.get("same", []), strict=False))
    rows: dict[Any, dict[str, Any]] = {}
    # as plan_report reads them: a plan whose kernel rows fall short lists the groups they cover
    for i, (g, k) in enumerate(zip(plan.groups, per_kernel, strict=False)):
        tiles = g.config.short() if g.config else "-"
        shape = tuple(same[n] for n in g.ops if n in same)  # views and constants have none
        fields = ("simulated_us", "unfused_predicted_us")
        us = tuple(round(k[f], 3) if k[f] is not None else None for f in fields)
        key: tuple[Any, ...] = (g.kind, tiles, shape, us, k["bound"], k["verdict"])
        if not shape:
            key = (i,)  # nothing to know it by: not folded
        if key in rows:
            rows[key]["count"] += 1
            continue
        extra = f" +{len(g.ops) - 1}" if len(g.ops) > 1 else ""
        rows[key] = {**k, "name": g.name or g.ops[0] + extra, "count": 1, "tiles": tiles}
    return list(rows.values())
