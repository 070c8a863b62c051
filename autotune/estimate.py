"""``autotune estimate``: cost a plan (``none`` or a plan file) of a model on a target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costmodel.exceptions import InfeasibleConfig
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.oracle import CostOracle
from costmodel.registry import make_cost_model
from costmodel.roofline import roofline_us
from costmodel.spec import Target, load_target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph, make_group, singleton_groups
from search_space.rules import Policy
from search_space.space import BASELINES, FusionPlan, PlanError, baseline_plan

__all__ = ["estimate_graph", "plan_kernels"]


def plan_kernels(
    graph: Graph, plan: str | FusionPlan, target: Target, policy: Policy | None = None
) -> tuple[list[FusionGroup], list[Kernel]]:
    """Groups and lowered kernels of a baseline (none, greedy, max, optimal) or a plan (file
    path or record).

    Raises:
        PlanError: a plan for another model, or naming unknown ops.
        InfeasibleConfig: a plan config that overflows a buffer on this target.
    """
    lowering = Lowering(graph, target)
    if isinstance(plan, str) and plan == "none":
        groups = singleton_groups(graph)
        return groups, lowering.kernels(groups)
    if isinstance(plan, str) and plan in BASELINES:
        policy = policy or Policy()
        ctx = FusionContext(graph, policy.no_fusion_ops, policy.max_fused_ops)
        oracle = CostOracle(graph, target, ctx=ctx)
        chosen = baseline_plan(plan, ctx, oracle, policy)
        return list(chosen.groups), [
            lowering.kernel(g, c) for g, c in zip(chosen.groups, chosen.configs, strict=True)
        ]
    record = plan if isinstance(plan, FusionPlan) else FusionPlan.load(Path(plan), graph)
    if isinstance(plan, FusionPlan):
        record.check_model(graph)
    if record.target != target.spec.name:
        raise PlanError(
            f"plan was tuned for target '{record.target}', not "
            f"'{target.spec.name}'; pass --target {record.target}"
        )
    groups = [make_group(graph, g.ops, g.kind) for g in record.groups]
    kernels = lowering.kernels(groups, [g.config for g in record.groups])
    for k in kernels:
        ok, why = k.feasible(target.spec)
        if not ok:
            raise InfeasibleConfig(f"plan kernel '{k.name}' ({k.config.short()}): {why}")
    return groups, kernels


def estimate_graph(
    graph: Graph,
    *,
    model_name: str,
    target: str = "ascend910b",
    sets: Sequence[str] | Mapping[str, Any] = (),
    precision: str = "auto",
    plan: str = "none",
    cost: str = "analytic",
    policy: Policy | None = None,
) -> dict[str, Any]:
    """Cost one plan of a graph; the dict ``autotune estimate --json`` prints."""
    tgt = load_target(target, sets, precision)
    _, kernels = plan_kernels(graph, plan, tgt, policy)
    model = make_cost_model(cost, tgt)
    costs = model.evaluate(kernels)
    total = float(sum(c.latency_us for c in costs))
    return {
        "model": model_name,
        "target": tgt.spec.name,
        "precision": tgt.precision,
        "plan": plan,
        "cost_model": cost,
        "latency_us": total,
        "roofline_us": roofline_us(graph, tgt),
        "kernels": len(kernels),
        "per_kernel": [
            {
                "ops": list(k.ops),
                "kind": k.kind,
                "unit": k.unit,
                "config": k.config.to_json(),
                "latency_us": c.latency_us,
                "bound": c.bound,
                "pipes_us": dict(c.pipes_us),
                "l2_hit_rate": c.l2_hit_rate,
            }
            for k, c in zip(kernels, costs, strict=True)
        ],
    }
