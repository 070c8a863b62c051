"""A study over shape ranges: one set of fusion decisions, a config table per bucket.

The study's space, baselines and trials live on the top bucket's graph (the session's
``graph``): a trial's groups are the one fused graph a serving engine compiles once. Each
bucket runs those groups at its own configs, each group's best under the study's model at the
bucket's shapes (as Triton's autotune keys configs on shapes); the top bucket keeps the
trial's own. A plan's score and its measurement are traffic-weighted sums over the buckets.
While searching they weigh a few representative buckets (``search_buckets``; each carries the
traffic of the buckets nearest it: :func:`search_space.shapes.representatives`), so a range
of 42 buckets does not cost 42 studies; :meth:`RangeEvaluator.finish` then weighs every
bucket by its own traffic, and the best candidates are measured at every bucket before the
pick (buckets of weight 0 get configs but cost nothing). :class:`RangeEvaluator` answers
what a session asks of an :class:`~autotune.tuner.evaluator.Evaluator`, with one per bucket
under it sharing the study's model: the rows every bucket measures refit it together, and
every bucket's configs follow the refit.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.tuner.config import SEARCH_BUCKETS
from autotune.tuner.evaluator import Evaluator
from autotune.tuner.records import MeasureResult
from costmodel.base import CostModel
from costmodel.exceptions import CostModelError
from costmodel.kernel import Kernel
from costmodel.measure import Measurement, merge_table
from costmodel.oracle import CostOracle
from costmodel.registry import make_cost_model
from costmodel.spec import Target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph, make_group
from search_space.rules import Policy
from search_space.shapes import Bucket, BucketGraphs, representatives
from search_space.space import SpacePlan

__all__ = ["BucketPlan", "RangeEvaluator", "range_suffix"]

FINAL = 4  # candidates measured at every bucket before the pick


def range_suffix(graphs: BucketGraphs, search_buckets: int = SEARCH_BUCKETS) -> str:
    """What a range study's default name adds: a digest of its buckets, their weights and
    how many it searches on (a study of other ranges, buckets or traffic scores other sums,
    and is another study)."""
    text = ";".join(f"{b.label}:{b.weight:.6g}" for b in graphs.buckets) + f"|{search_buckets}"
    return "-r" + hashlib.sha256(text.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class BucketPlan:
    """A plan at one bucket: its groups on the bucket's graph at the bucket's configs (None:
    a group fits no config at these shapes, and the plan cannot run here)."""

    bucket: Bucket
    plan: SpacePlan | None


class _Bucket:
    """One bucket's graph, its evaluator and the oracle that picks its configs (made on first
    use: the top bucket's configs are the trial's own, and it never needs one)."""

    def __init__(
        self,
        bucket: Bucket,
        graph: Graph,
        target: Target,
        model: CostModel,
        policy: Policy,
        **kw: Any,
    ) -> None:
        self.bucket, self.graph = bucket, graph
        self.target, self.model, self.policy = target, model, policy
        self.ev = Evaluator(graph, target, model, **kw)
        self._groups: dict[tuple[str, ...], FusionGroup] = {}

    @functools.cached_property
    def oracle(self) -> CostOracle:
        ctx = FusionContext(self.graph, self.policy.no_fusion_ops, self.policy.max_fused_ops)
        rank = make_cost_model("analytic", self.target)
        return CostOracle(self.graph, self.target, model=self.model, ctx=ctx, rank_model=rank)

    def refresh(self) -> None:
        """The best configs follow a refitted model (an oracle not made yet has none)."""
        if "oracle" in vars(self):
            self.oracle.refresh()

    def group(self, g: FusionGroup) -> FusionGroup:
        """The top bucket's group on this bucket's graph (the same ops)."""
        if g.ops not in self._groups:
            self._groups[g.ops] = make_group(self.graph, g.ops, g.kind)
        return self._groups[g.ops]

    def at(self, plan: SpacePlan) -> SpacePlan | None:
        """``plan``'s groups here, each at its best config here (None where one fits none)."""
        groups = tuple(self.group(g) for g in plan.groups)
        try:
            best = [self.oracle.best(g) for g in groups]
        except CostModelError:
            return None
        if any(not math.isfinite(cost) for _, cost in best):
            return None
        return SpacePlan(groups, tuple(c for c, _ in best))


class RangeEvaluator:
    """Scores and measures a top-bucket plan at every bucket (module docstring).

    Args:
        graphs: the buckets and their graphs (the last, the top bucket, is the study's).
        target, model: the target; the study's model, shared by every bucket.
        policy: what limits a bucket's groups (as the study's).
        retrain_every: refit a learned model after this many new rows (every bucket's).
        family, study: provenance written on every row.
    """

    def __init__(
        self,
        graphs: BucketGraphs,
        target: Target,
        model: CostModel,
        policy: Policy,
        *,
        search_buckets: int = SEARCH_BUCKETS,
        retrain_every: int = 32,
        family: str = "model",
        study: str = "",
    ) -> None:
        kw = {"retrain_every": retrain_every, "family": family, "study": study}
        self.buckets = [
            _Bucket(b, g, target, model, policy, **kw)
            for b, g in zip(graphs.buckets, graphs.graphs, strict=True)
        ]
        # the search weighs these (each with its neighbours' traffic); :meth:`finish` all
        self.search = representatives(graphs.buckets, graphs.ranges, search_buckets)
        self.full = len(self.search) == len(self.buckets)
        self.top = self.buckets[-1].ev  # the study's graph: its kernels are the report's
        self.model, self.target = model, target
        self.retrain_every = retrain_every
        self.refits = 0
        # (plan key, bucket) -> the plan there: only the buckets that weigh are ever asked
        self._plans: dict[tuple[str, int], SpacePlan | None] = {}
        self._measured: dict[tuple[str, bool], MeasureResult] = {}
        # plan key -> what was simulated: each bucket's plan and latency (None: not run)
        self.measured_at: dict[str, list[tuple[BucketPlan, float | None]]] = {}

    # -- what a session asks ---------------------------------------------------------------
    @property
    def study(self) -> str:
        return self.top.study

    @study.setter
    def study(self, name: str) -> None:
        for b in self.buckets:
            b.ev.study = name

    @property
    def simulator(self) -> CostModel:
        return self.top.simulator

    @property
    def rows(self) -> list[Measurement]:
        return [r for b in self.buckets for r in b.ev.rows]

    def kernels(self, plan: SpacePlan) -> list[Kernel]:
        """The top bucket's kernels (the study's graph)."""
        return self.top.kernels(plan)

    def kernel_latencies(self, plan: SpacePlan) -> list[float]:
        """Each kernel's predicted latency at the top bucket."""
        return self.top.kernel_latencies(plan)

    def at(self, plan: SpacePlan, i: int, key: str | None = None) -> SpacePlan | None:
        """The plan at bucket ``i``: the top bucket's as given, another's at its configs
        (``key``: the plan's, when the caller has it)."""
        if i == len(self.buckets) - 1:
            return plan
        k = (key or plan.key(), i)
        if k not in self._plans:
            self._plans[k] = self.buckets[i].at(plan)
        return self._plans[k]

    def expand(self, plan: SpacePlan) -> list[BucketPlan]:
        """The plan at every bucket."""
        key = plan.key()
        return [BucketPlan(b.bucket, self.at(plan, i, key)) for i, b in enumerate(self.buckets)]

    def score(self, plan: SpacePlan) -> float:
        """The traffic-weighted predicted latency (us) under the current model."""
        return self._weighted(plan, lambda ev, p: ev.score(p))

    def prior_score(self, plan: SpacePlan) -> float:
        """As :meth:`score`, under the study model's prior."""
        return self._weighted(plan, lambda ev, p: ev.prior_score(p))

    def weight(self, i: int) -> float:
        """Bucket ``i``'s weight in scores and measurements now: its representative's share
        while searching, its own once :meth:`finish` has run."""
        return self.buckets[i].bucket.weight if self.full else self.search.get(i, 0.0)

    def _weighted(self, plan: SpacePlan, one: Any) -> float:
        total, key = 0.0, plan.key()
        for i, b in enumerate(self.buckets):
            if self.weight(i) == 0:
                continue
            here = self.at(plan, i, key)
            if here is None:
                return math.inf
            total += self.weight(i) * one(b.ev, here)
        return total

    def prefetch(self, plans: Sequence[SpacePlan], prior: bool = False) -> None:
        """Score many plans at once at every bucket that weighs (each bucket's new groups'
        grids first, in one call of the model)."""
        for i, b in enumerate(self.buckets):
            if self.weight(i) == 0:
                continue
            if b.ev is not self.top:
                b.oracle.prefetch(b.group(g) for p in plans for g in p.groups)
            here = [self.at(p, i) for p in plans]
            b.ev.prefetch([p for p in here if p is not None], prior)

    def measure(self, plan: SpacePlan) -> MeasureResult:
        """The plan simulated at every bucket that weighs; its latency the weighted sum (a
        bucket that fails, or where the plan cannot run, fails the measurement)."""
        key = (plan.key(), self.full)
        if key not in self._measured:
            self._measured[key] = self._measure(plan, key[0])
        return self._measured[key]

    def _measure(self, plan: SpacePlan, key: str) -> MeasureResult:
        total, each = 0.0, list[tuple[BucketPlan, float | None]]()
        for i, b in enumerate(self.buckets):
            bp = BucketPlan(
                b.bucket, self.at(plan, i, key) if self.full or self.weight(i) else None
            )
            if self.weight(i) == 0:
                each.append((bp, None))
                continue
            if bp.plan is None:
                return MeasureResult(None, f"bucket {bp.bucket.label}: a group fits no config")
            got = b.ev.measure(bp.plan)
            if not got.ok:
                return MeasureResult(None, f"bucket {bp.bucket.label}: {got.error}")
            assert got.latency_us is not None
            each.append((bp, got.latency_us))
            total += self.weight(i) * got.latency_us
        if self.full:  # the plan record's table: every bucket, at its own weight
            self.measured_at[key] = each
        return MeasureResult(total)

    def finish(self) -> bool:
        """From now on every bucket weighs its own traffic (the last candidates are measured
        at every bucket). Whether that changes anything (False: the search had them all)."""
        was, self.full = self.full, True
        return not was

    def retrain(self, force: bool = False) -> bool:
        """Refit a model that learns on every bucket's new rows together (and every bucket's
        configs follow it)."""
        waiting = sum(b.ev.pending for b in self.buckets)
        if not self.model.learns or not waiting:
            return False
        if waiting < self.retrain_every and not force:
            return False
        before = self.model.version
        self.model.update([r for b in self.buckets for r in b.ev.take_pending()])
        if self.model.version == before:
            return False
        self.refits += 1
        self._plans.clear()  # each bucket's best configs under the refitted model
        for b in self.buckets:
            b.refresh()
        return True

    def load_rows(self, path: Path) -> int:
        """Rows an earlier run of this study measured (every bucket's, held by the top's)."""
        return self.top.load_rows(path)

    def save_rows(self, path: Path) -> None:
        """Every bucket's rows, merged into the run's dataset in one write."""
        if self.rows:
            merge_table(self.rows, path)
