"""``autotune estimate --shape-range``: one fusion plan costed at every bucket of a range.

A served model compiles one fused graph and runs it at many shapes, so the groups are the
same at every bucket: they are chosen once, on the top bucket's graph (a baseline: none,
greedy, max or optimal), and each bucket's kernels take that bucket's own configs (the
baseline's rule at its shapes: the default config for none and greedy, the model's best for
max and optimal). A plan file tuned over ranges runs each shape at its bucket's configs (a
shape between two edges at the next one's). The range's latency is the traffic-weighted sum
of the buckets'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.estimate import Estimate, costed, plan_kernels
from autotune.plan_file import read_plan
from autotune.vocabulary import kind_of, latency, schema
from costmodel.exceptions import InfeasibleConfig
from costmodel.kernel import Kernel
from costmodel.oracle import CostOracle
from costmodel.registry import make_cost_model
from costmodel.residency import resident_context
from costmodel.spec import Target, load_target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph, make_group
from search_space.rules import Policy
from search_space.shapes import Bucket, BucketGraphs
from search_space.space import BASELINES, PlanError, baseline_config

__all__ = ["RangeEstimate", "bucket_kernels", "estimate_range"]


def bucket_kernels(
    graph: Graph, groups: Sequence[FusionGroup], plan: str, target: Target, policy: Policy
) -> list[Kernel]:
    """The top bucket's ``groups`` on another bucket's ``graph``, each lowered at that
    bucket's config under the baseline's rule (:func:`search_space.space.baseline_config`).

    Raises:
        InfeasibleConfig: a group no config of which fits a buffer at this bucket.
    """
    ctx = FusionContext(graph, policy.no_fusion_ops, policy.max_fused_ops)
    oracle = CostOracle(graph, target, ctx=ctx)
    mine = [make_group(graph, g.ops, g.kind) for g in groups]
    kernels = [oracle.lowering.kernel(g, baseline_config(plan, oracle, g)) for g in mine]
    for k in kernels:
        ok, why = k.feasible(target.spec)
        if not ok:
            raise InfeasibleConfig(f"kernel '{k.name}' ({k.config.short()}) at this shape: {why}")
    return kernels


@dataclass(frozen=True)
class RangeEstimate:
    """A plan costed at every bucket of a model's shape ranges."""

    ranges: str
    buckets: tuple[tuple[Bucket, Estimate], ...]

    @property
    def latency_us(self) -> float:
        """The traffic-weighted latency over the buckets."""
        return float(sum(b.weight * e.latency_us for b, e in self.buckets))

    def to_json(self) -> dict[str, Any]:
        """The document ``autotune.estimate_range`` (``docs/json.md``)."""
        first = self.buckets[0][1]
        return {
            "schema": schema("estimate_range"),
            "latency": latency(self.latency_us, kind_of(first.cost_model), first.cost_model),
            "model": first.model,
            "target": first.target,
            "precision": first.precision,
            "plan": first.plan,
            "cost_model": first.cost_model,
            "resident": first.resident,
            "shape_ranges": self.ranges,
            "buckets": [
                {"dims": b.values, "weight": b.weight, **e.to_json()} for b, e in self.buckets
            ],
        }


def estimate_range(
    graphs: BucketGraphs,
    *,
    model_name: str,
    target: str = "ascend910b",
    sets: Sequence[str] | Mapping[str, Any] = (),
    precision: str = "auto",
    plan: str = "none",
    cost: str = "analytic",
    policy: Policy | None = None,
    resident: str = "none",
) -> RangeEstimate:
    """Cost a plan at every bucket: a baseline's grouping (chosen on the top bucket) at each
    bucket's configs, or a plan file (a range plan at each shape's bucket's configs; a plan
    of one shape only at its own).

    Raises:
        PlanError: a plan file for another model, or for a range that does not hold a
            bucket; InfeasibleConfig: a group that fits no config at some bucket;
            CostModelError: an unknown cost model.
    """
    policy = policy or Policy()
    tgt = load_target(target, sets, precision)
    record = None if plan in BASELINES else read_plan(Path(plan))
    groups = [] if record is not None else plan_kernels(graphs.reference, plan, tgt, policy)[0]
    model = make_cost_model(cost, tgt)
    out = []
    for bucket, graph in zip(graphs.buckets, graphs.graphs, strict=True):
        try:
            kernels = (
                plan_kernels(graph, record, tgt, policy)[1]
                if record is not None
                else bucket_kernels(graph, groups, plan, tgt, policy)
            )
        except (InfeasibleConfig, PlanError) as err:
            raise type(err)(f"bucket {bucket.label}: {err}") from None
        run, warm = resident_context(resident, graph, tgt)
        costs = (model if run is tgt else make_cost_model(cost, run)).evaluate(kernels, warm)
        estimate = costed(model_name, graph, tgt, plan, cost, resident, kernels, costs)
        out.append((bucket, estimate))
    return RangeEstimate(", ".join(map(str, graphs.ranges.ranges)), tuple(out))
