"""The search space (docs/fusion.md): the Optuna parameterisation of fusion and tiling, the
baselines beside it (none, greedy, max, the exact optimal) and the persisted plan record."""

from __future__ import annotations

from search_space.space.baselines import (
    BASELINES,
    baseline_config,
    baseline_partition,
    baseline_plan,
    plan_cost,
)
from search_space.space.classes import op_hashes
from search_space.space.memory import peak_live_bytes
from search_space.space.names import kernel_names
from search_space.space.optimal import (
    OptimalResult,
    OptimalUnavailable,
    candidate_groups,
    connected_subsets,
    fusion_adjacency,
    optimal_partition,
)
from search_space.space.plan import SCHEMA_VERSION, FusionPlan, PlanBucket, PlanError, PlanGroup
from search_space.space.search import (
    STRATEGIES,
    GroupOracle,
    SearchSpace,
    SpacePlan,
    TrialLike,
    build_space,
)

__all__ = [
    "BASELINES",
    "SCHEMA_VERSION",
    "STRATEGIES",
    "FusionPlan",
    "GroupOracle",
    "OptimalResult",
    "OptimalUnavailable",
    "PlanBucket",
    "PlanError",
    "PlanGroup",
    "SearchSpace",
    "SpacePlan",
    "TrialLike",
    "baseline_config",
    "baseline_partition",
    "baseline_plan",
    "build_space",
    "candidate_groups",
    "connected_subsets",
    "fusion_adjacency",
    "kernel_names",
    "op_hashes",
    "optimal_partition",
    "peak_live_bytes",
    "plan_cost",
]
