"""Baseline plans beside the search space (docs/fusion.md): none, greedy, max and optimal.

* ``none``: every op its own kernel at its default (hand-written) config.
* ``greedy``: the seed tools' way: the preset's rules in priority order, default configs.
* ``max``: every legal edge fused (repaired), each group at its best config.
* ``optimal``: the exact minimum of the additive analytic cost over candidate groups (ILP).
"""

from __future__ import annotations

from typing import Any

from search_space.exceptions import AutofusionError
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, KernelConfig
from search_space.rules import Policy, greedy, policy_rules
from search_space.space.search import GroupOracle, SpacePlan

__all__ = [
    "BASELINES",
    "baseline_config",
    "baseline_partition",
    "baseline_plan",
    "plan_cost",
]

BASELINES = ("none", "greedy", "max", "optimal")


def baseline_partition(
    kind: str,
    ctx: FusionContext,
    oracle: GroupOracle,
    policy: Policy | None = None,
    *,
    optimal_time_limit: float = 60.0,
    optimal_max_candidates: int = 200_000,
    optimal_node_limit: int = 2**31 - 1,  # HiGHS default: no limit
) -> list[frozenset[str]]:
    """The partition of ``ctx.nodes`` a baseline chooses; ``optimal_*``: the exact optimum's
    limits (:func:`~search_space.space.optimal.optimal_partition`).

    Raises:
        AutofusionError: unknown baseline; ``OptimalUnavailable`` when the exact optimum cannot
            be computed in time (never a guess).
    """
    policy = policy or Policy()
    if kind == "none" or policy.fusion_level == 0:
        return [frozenset([n]) for n in ctx.nodes]
    if kind == "greedy":
        partition, _ = greedy(ctx, policy_rules(policy), oracle.feasible)
        return partition
    if kind == "max":
        return ctx.repair(ctx.edges, oracle.feasible)
    if kind == "optimal":
        from search_space.space.optimal import optimal_partition

        extra = [
            *baseline_partition("greedy", ctx, oracle, policy),
            *baseline_partition("max", ctx, oracle, policy),
        ]

        def cost(ops: frozenset[str]) -> float:
            return oracle.best(ctx.group(ops))[1]

        result = optimal_partition(
            ctx,
            cost,
            feasible=oracle.feasible,
            extra_groups=extra,
            time_limit=optimal_time_limit,
            max_candidates=optimal_max_candidates,
            node_limit=optimal_node_limit,
        )
        return result.partition
    raise AutofusionError(
        f"unknown plan '{kind}'; available: {', '.join(BASELINES)}, or a plan file"
    )


def baseline_plan(
    kind: str,
    ctx: FusionContext,
    oracle: GroupOracle,
    policy: Policy | None = None,
    **kw: Any,
) -> SpacePlan:
    """A baseline as groups + configs (default configs for none/greedy, best for max/optimal)."""
    partition = baseline_partition(kind, ctx, oracle, policy, **kw)
    groups = tuple(ctx.to_groups(partition))
    return SpacePlan(groups, tuple(baseline_config(kind, oracle, g) for g in groups))


def baseline_config(kind: str, oracle: GroupOracle, group: FusionGroup) -> KernelConfig:
    """A baseline's config of one group: the default for none and greedy (what a rulebook
    compiler runs), the oracle's best for max and optimal."""
    return oracle.default(group) if kind in ("none", "greedy") else oracle.best(group)[0]


def plan_cost(plan: SpacePlan, oracle: GroupOracle) -> float:
    """Additive (standalone, cold-L2) analytic cost of a plan, in us."""
    return sum(oracle.cost(g, c) for g, c in zip(plan.groups, plan.configs, strict=True))
