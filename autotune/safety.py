"""Safe mode: verify the winning plan's fused kernels numerically and unfuse the failures."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from search_space.graph import Graph
from search_space.groups import make_group
from search_space.space import SpacePlan

from .models import ZooOptions

__all__ = ["make_safety"]

log = logging.getLogger(__name__)


def make_safety(
    graph: Graph,
    model: str,
    zoo: ZooOptions,
    shapes: Mapping[str, Sequence[int]],
    policy: Any,
    cfg: Any,
) -> Callable[[SpacePlan], tuple[SpacePlan, dict[str, int]]]:
    """A hook for :func:`autotune.tuner.tune_graph` that runs kernel verification."""

    def check(plan: SpacePlan) -> tuple[SpacePlan, dict[str, int]]:
        import onnx

        from costmodel.spec import load_target
        from search_space.onnx_io import read_model
        from search_space.plan import PlanGroup

        from .models import resolve_model
        from .verify import safe_groups, verify_kernels

        source = resolve_model(
            model,
            ZooOptions(**{**zoo.__dict__, "weights": "random"})
            if model.startswith("zoo:")
            else zoo,
        )
        proto = source if isinstance(source, onnx.ModelProto) else read_model(source)[0]
        target = load_target(cfg.target, cfg.sets, cfg.precision)
        groups = [
            PlanGroup(g.ops, g.kind, c) for g, c in zip(plan.groups, plan.configs, strict=True)
        ]
        verdicts = verify_kernels(proto, graph, groups, target, policy)
        kept, counts = safe_groups(groups, verdicts)
        if len(kept) == len(groups):
            return plan, counts
        new_groups = tuple(make_group(graph, g.ops, g.kind) for g in kept)
        by_ops = {g.ops: c for g, c in zip(plan.groups, plan.configs, strict=True)}
        from costmodel.lower import Lowering

        low = Lowering(graph, target)
        configs = tuple(by_ops.get(g.ops) or low.default(g) for g in new_groups)
        return SpacePlan(new_groups, configs), counts

    return check
