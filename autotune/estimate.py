"""``autotune estimate``: cost a plan (``none`` or a plan file) of a model on a target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.plan_file import read_plan
from autotune.vocabulary import kind_of, latency, schema
from costmodel.base import KernelCost
from costmodel.exceptions import InfeasibleConfig, SpecError
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.oracle import CostOracle
from costmodel.registry import make_cost_model
from costmodel.residency import resident_context
from costmodel.roofline import roofline_us
from costmodel.spec import Target, load_target
from search_space.fusion import FusionContext
from search_space.ir import (
    FusionGroup,
    Graph,
    KernelConfig,
    empty_tensors,
    make_group,
    singleton_groups,
)
from search_space.rules import Policy
from search_space.space import BASELINES, FusionPlan, PlanError, baseline_plan

__all__ = ["Estimate", "KernelEstimate", "costed", "estimate_graph", "plan_kernels", "plan_target"]


def plan_kernels(
    graph: Graph, plan: str | FusionPlan, target: Target, policy: Policy | None = None
) -> tuple[list[FusionGroup], list[Kernel]]:
    """Groups and lowered kernels of a baseline (none, greedy, max, optimal) or a plan (file
    path or record). A model with an empty tensor does no work: each op alone, no kernel.

    Raises:
        PlanError: a plan for another model, or naming unknown ops.
        InfeasibleConfig: a plan config that overflows a buffer on this target.
    """
    empty = bool(empty_tensors(graph))
    if isinstance(plan, str) and plan in BASELINES and (empty or plan == "none"):
        groups = singleton_groups(graph)
        return groups, [] if empty else Lowering(graph, target).kernels(groups)
    if isinstance(plan, str) and plan in BASELINES:
        policy = policy or Policy()
        ctx = FusionContext(graph, policy.no_fusion_ops, policy.max_fused_ops)
        oracle = CostOracle(graph, target, ctx=ctx)
        chosen = baseline_plan(plan, ctx, oracle, policy)
        lowering = oracle.lowering
        return list(chosen.groups), [
            lowering.kernel(g, c) for g, c in zip(chosen.groups, chosen.configs, strict=True)
        ]
    record = plan if isinstance(plan, FusionPlan) else read_plan(Path(plan), graph)
    if isinstance(plan, FusionPlan):
        record.check_model(graph)
    record = record.at_shape(graph)  # a range plan: the configs of this shape's bucket
    if record.target != target.spec.name:
        raise PlanError(
            f"plan was tuned for target '{record.target}', not "
            f"'{target.spec.name}'; pass --target {record.target}"
        )
    groups = [make_group(graph, g.ops, g.kind) for g in record.groups]
    if empty:
        return groups, []
    kernels = Lowering(graph, target).kernels(groups, [g.config for g in record.groups])
    for k in kernels:
        ok, why = k.feasible(target.spec)
        if not ok:
            raise InfeasibleConfig(f"plan kernel '{k.name}' ({k.config.short()}): {why}")
    return groups, kernels


def plan_target(record: FusionPlan) -> Target:
    """The target a plan was tuned for, as it was tuned (its spec source, ``--set`` values
    and precision); a spec file no longer at hand falls back to the built-in of that name.

    Raises:
        SpecError: neither can be loaded.
    """
    meta = dict(record.meta)
    source = str(meta.get("target_source", record.target))
    sets = tuple(meta.get("sets", ()))
    try:
        return load_target(source, sets, record.precision)
    except SpecError:
        if source == record.target:
            raise
        return load_target(record.target, sets, record.precision)


@dataclass(frozen=True)
class KernelEstimate:
    """One kernel of an estimated plan: its ops, config and what it costs."""

    ops: tuple[str, ...]
    kind: str
    unit: str
    config: KernelConfig
    cost: KernelCost

    @property
    def latency_us(self) -> float:
        return self.cost.latency_us

    @property
    def bound(self) -> str:
        return self.cost.bound

    def to_json(self) -> dict[str, Any]:
        return {
            "ops": list(self.ops),
            "kind": self.kind,
            "unit": self.unit,
            "config": self.config.to_json(),
            "us": self.cost.latency_us,
            "device_us": self.cost.device_us,
            "bound": self.cost.bound,
            "pipes_us": dict(self.cost.pipes_us),
            "l2_hit_rate": self.cost.l2_hit_rate,
        }


@dataclass(frozen=True)
class Estimate:
    """A plan of a model costed on a target (what ``autotune estimate`` prints)."""

    model: str
    target: str
    precision: str
    plan: str
    cost_model: str
    roofline_us: float
    kernels: tuple[KernelEstimate, ...]
    resident: str = "none"

    @property
    def latency_us(self) -> float:
        """The plan's latency: its kernels run back to back."""
        return float(sum(k.latency_us for k in self.kernels))

    def time_by_bound(self) -> dict[str, float]:
        """Microseconds spent in kernels of each bound (HBM, a pipe, launch...)."""
        out: dict[str, float] = {}
        for k in self.kernels:
            out[k.bound] = out.get(k.bound, 0.0) + k.latency_us
        return out

    def latency(self) -> dict[str, Any]:
        """The plan's latency with its kind: ``predicted`` by a cost model, or ``simulated``."""
        return latency(self.latency_us, kind_of(self.cost_model), self.cost_model)

    def to_json(self) -> dict[str, Any]:
        """The document ``autotune.estimate`` (``docs/json.md``): every time in it, the
        kernels' ``us`` too, is of the kind its ``latency`` says."""
        return {
            "schema": schema("estimate"),
            "latency": self.latency(),
            "model": self.model,
            "target": self.target,
            "precision": self.precision,
            "plan": self.plan,
            "cost_model": self.cost_model,
            "resident": self.resident,
            "roofline_us": self.roofline_us,
            "n_kernels": len(self.kernels),
            "kernels": [k.to_json() for k in self.kernels],
        }


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
    resident: str = "none",
) -> Estimate:
    """Cost one plan of a graph (a baseline name or a plan file) on a target, from a cold L2
    (``resident="none"``) or with the graph's inputs in L2 as their producers just wrote them
    and their prologues' reads hitting L2 (``"inputs"``: a kernel inside a real step;
    :mod:`costmodel.residency`).

    Raises:
        PlanError: a plan for another model or target; InfeasibleConfig: a plan config that
            overflows a buffer; CostModelError: an unknown cost model.
    """
    tgt = load_target(target, sets, precision)
    _, kernels = plan_kernels(graph, plan, tgt, policy)
    run, warm = resident_context(resident, graph, tgt)
    costs = make_cost_model(cost, run).evaluate(kernels, warm)
    return costed(model_name, graph, tgt, plan, cost, resident, kernels, costs)


def costed(
    model_name: str,
    graph: Graph,
    tgt: Target,
    plan: str,
    cost: str,
    resident: str,
    kernels: Sequence[Kernel],
    costs: Sequence[KernelCost],
) -> Estimate:
    """The estimate of ``graph``'s ``kernels`` as ``cost`` costed them."""
    return Estimate(
        model=model_name,
        target=tgt.spec.name,
        precision=tgt.precision,
        plan=plan,
        cost_model=cost,
        resident=resident,
        roofline_us=roofline_us(graph, tgt),
        kernels=tuple(
            KernelEstimate(tuple(k.ops), k.kind, k.unit, k.config, c)
            for k, c in zip(kernels, costs, strict=True)
        ),
    )
