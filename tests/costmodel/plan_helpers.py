"""Baseline plans of a graph lowered to kernels and costed, from the packages below the tuner
(as the estimate command costs a baseline name): the tests of the cost model import
only ``costmodel`` and ``search_space``."""

from __future__ import annotations

from collections.abc import Sequence

from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.oracle import CostOracle
from costmodel.registry import make_cost_model
from costmodel.residency import resident_context
from costmodel.spec import Target, load_target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph, empty_tensors, singleton_groups
from search_space.rules import Policy
from search_space.space import baseline_plan


def plan_kernels(
    graph: Graph, plan: str, target: Target
) -> tuple[list[FusionGroup], list[Kernel]]:
    """Groups and kernels of a baseline (``none``, ``greedy``, ``max``, ``optimal``), each
    group at the config the baseline picks (``none``: each op alone at its default config);
    a model with an empty tensor does no work: each op alone, no kernel."""
    empty = bool(empty_tensors(graph))
    if empty or plan == "none":
        groups = singleton_groups(graph)
        return groups, [] if empty else Lowering(graph, target).kernels(groups)
    policy = Policy()
    ctx = FusionContext(graph, policy.no_fusion_ops, policy.max_fused_ops)
    oracle = CostOracle(graph, target, ctx=ctx)
    chosen = baseline_plan(plan, ctx, oracle, policy)
    kernels = [
        oracle.lowering.kernel(g, c) for g, c in zip(chosen.groups, chosen.configs, strict=True)
    ]
    return list(chosen.groups), kernels


def plan_latency_us(
    graph: Graph, kind: str, plan: str = "none", sets: Sequence[str] = ()
) -> float:
    """The plan run back to back on the 910B (``sets`` applied) from a cold L2, as ``kind``
    costs it."""
    target = load_target("ascend910b", sets)
    _, kernels = plan_kernels(graph, plan, target)
    run, warm = resident_context("none", graph, target)
    return float(sum(c.latency_us for c in make_cost_model(kind, run).evaluate(kernels, warm)))
