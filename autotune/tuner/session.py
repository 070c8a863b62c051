"""One study's working state, shared by the steps of the loop (:mod:`autotune.tuner.steps`).

A :class:`Session` holds what a study is about (the graph, its space, the baselines), the
Optuna study, the evaluator that scores and measures plans, and the candidates measured so far.
Its methods are the small questions every step asks: a trial's plan, its score now, whether a
plan fits the memory limit, what a local-search move costs.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.exceptions import AutotuneError
from autotune.tuner.clock import Clock
from autotune.tuner.config import TuneConfig
from autotune.tuner.evaluator import Evaluator, make_study_model
from autotune.tuner.leases import reap
from autotune.tuner.ranges import FINAL, RangeEvaluator, range_suffix
from autotune.tuner.records import Candidate
from autotune.tuner.safety import Safety
from autotune.tuner.study import (
    drop_if_empty,
    fresh_name,
    journal_path,
    measured_name,
    open_storage,
    open_study,
    study_name,
)
from autotune.verify import KernelVerdict
from costmodel.base import CostModel
from costmodel.oracle import CostOracle
from costmodel.registry import make_cost_model
from costmodel.spec import Target, load_target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph
from search_space.shapes import BucketGraphs
from search_space.space import SearchSpace, SpacePlan, baseline_plan, build_space, peak_live_bytes

__all__ = ["FORBIDDEN", "RESCORE", "Session", "dropped_on_failure"]

log = logging.getLogger(__name__)

RESCORE = 15  # after a refit, the best trials by stored value re-ranked by the model as it is
COMPLETE = optuna.trial.TrialState.COMPLETE
FORBIDDEN = "forbidden_signatures"  # study user attr: signature -> why its kernel may not fuse


@dataclass
class Session:
    """The state a study's steps share. Built by :meth:`open`; ``measured`` grows as plans
    are measured (keyed by plan: a plan is measured once)."""

    graph: Graph
    config: TuneConfig
    name: str
    target: Target
    ctx: FusionContext
    ev: Evaluator | RangeEvaluator
    oracle: CostOracle
    space: SearchSpace
    study: optuna.Study
    study_name: str
    storage_name: str
    dataset: Path
    baselines: dict[str, SpacePlan]
    fresh: bool  # the study had no trials before this run (warm starts are enqueued)
    done: int = 0  # trials the study had before this run
    measured: dict[str, Candidate] = field(default_factory=dict)
    replayed: set[int] = field(default_factory=set)
    blocks: list[tuple[str, ...]] = field(default_factory=list)
    swaps: list[tuple[str, str]] = field(default_factory=list)
    safety: Safety | None = None  # safe mode: every measured plan is checked first
    clock: Clock = field(default_factory=Clock)  # wall time per phase (meta.timing_s)
    interrupted: bool = False  # Ctrl-C ended the trials (the plan is the best so far)
    storage: optuna.storages.BaseStorage | str | None = None  # where the study lives
    checks: dict[str, dict[str, int]] = field(default_factory=dict)  # plan key -> verdicts
    buckets: BucketGraphs | None = None  # shape ranges: the graph is the top bucket's

    @classmethod
    def open(
        cls,
        graph: Graph,
        config: TuneConfig,
        name: str,
        safety: Safety | None = None,
        buckets: BucketGraphs | None = None,
    ) -> Session:
        """Build the space and the models, open (or resume) the study (with the signatures
        it has forbidden so far). ``safety``: safe mode's check, run on every plan measured;
        ``buckets``: shape ranges (``graph`` is the top bucket's; :mod:`.ranges`).

        Raises:
            AutotuneError: a storage, study or cost model that cannot be opened.
        """
        target = load_target(config.target, config.sets, config.precision)
        policy = config.policy
        ctx = FusionContext(graph, policy.no_fusion_ops, policy.max_fused_ops)
        model = make_study_model(config.cost, target, config.cost_model_file)
        suffix = "" if buckets is None else range_suffix(buckets, config.search_buckets)
        sname = config.study or study_name(graph, target, config, name) + suffix
        # before the storage: a model that cannot be costed leaves no journal behind
        ev = _evaluator(graph, target, model, config, name, sname, buckets)
        if config.trials == 0:  # nothing to pick from: before the storage, none is made
            _require_file(config)
        storage, storage_name = open_storage(config.storage)
        if config.new:
            sname = ev.study = fresh_name(storage, sname, given=config.study is not None)
        if config.trials == 0 and sname not in optuna.get_all_study_names(storage):
            raise AutotuneError(_NO_STUDY.format(sname, storage_name))
        dataset = _dataset_path(config, storage_name)
        if ev.load_rows(dataset):
            ev.retrain(force=True)  # a resumed study continues from what it had learned
        # grids are ranked by the calibrated analytic model, which does not learn: a config
        # index keeps its meaning across refits and resumes; costs and best configs use the
        # study's model
        oracle = CostOracle(
            graph,
            target,
            model=model,
            ctx=ctx,
            rank_model=make_cost_model("analytic", target),
        )
        numeric = config.sampler in ("cmaes", "gp")
        space = build_space(ctx, oracle, policy, strategy=config.strategy, numeric=numeric)
        study, done = open_study(storage, sname, config)
        with dropped_on_failure(storage, sname, done):
            baselines = {
                k: baseline_plan(k, ctx, oracle, policy) for k in ("none", "greedy", "max")
            }
            out = cls(
                graph,
                config,
                name,
                target,
                ctx,
                ev,
                oracle,
                space,
                study,
                sname,
                storage_name,
                dataset,
                baselines,
                fresh=done == 0,
                done=done,
                blocks=space.block_moves(),
                swaps=space.swap_moves(),
                safety=safety if policy.safe_mode else None,
                storage=storage,
                buckets=buckets,
            )
            out.sync_forbidden()
            reap(study)  # trials a killed worker left RUNNING: failed, retried once
        return out

    def dropped_on_failure(self) -> contextlib.AbstractContextManager[None]:
        """Run a block of the study's work; if it fails (an error, Ctrl-C) before any trial of
        a study this run created completes, the empty study is deleted again."""
        assert self.storage is not None
        return dropped_on_failure(self.storage, self.study_name, self.done)

    # -- what the steps ask -----------------------------------------------------------------
    @property
    def hedges(self) -> bool:
        """A learned, single-objective study also measures where its prior's descents end."""
        return self.ev.model.learns and not self.config.multi

    def complete(self) -> list[optuna.trial.FrozenTrial]:
        return [t for t in self.study.trials if t.state == COMPLETE]

    def replay(self, t: optuna.trial.FrozenTrial) -> SpacePlan:
        """The plan a trial's parameters make (repaired and configured as the space does
        now)."""
        return self.space.replay(t.params)

    def now(self, t: optuna.trial.FrozenTrial) -> float:
        """A trial's score under the study's model as it is now: a value stored before the
        last refit came from another model (cached by plan and model version)."""
        if not self._stale(t):
            return float(t.values[0])
        return self.ev.score(self.replay(t))

    def _stale(self, t: optuna.trial.FrozenTrial) -> bool:
        return (
            t.user_attrs.get("cost_model") != self.ev.model.version and "plan_key" in t.user_attrs
        )

    def ranked(self, trials: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
        """Trials by stored value, the ``RESCORE`` best of them re-ordered by their score now."""
        by_value = sorted(trials, key=lambda t: t.values[0])
        self.ev.prefetch([self.replay(t) for t in by_value[:RESCORE] if self._stale(t)])
        return sorted(by_value[:RESCORE], key=self.now) + by_value[RESCORE:]

    def fits(self, groups: Sequence[FusionGroup]) -> bool:
        """Within the policy's max_mem_usage (always, without one)."""
        limit = self.config.policy.max_mem_usage
        return limit is None or peak_live_bytes(self.graph, groups) <= limit

    def mutant_cost(self, params: dict[str, Any]) -> float:
        """The study model's cost of a local-search move (fusion decisions only; each group
        at its best or default config, as :meth:`SearchSpace.plan` picks); ``inf`` over the
        memory limit, which would drop the plan anyway."""
        plan = self.space.plan_for(params)
        return self.ev.score(plan) if self.fits(plan.groups) else math.inf

    def prior_cost(self, params: dict[str, Any]) -> float:
        """As :meth:`mutant_cost`, under the calibrated analytic model (the learned model's
        prior, which its correction may mislead far from the rows it was fitted on)."""
        plan = self.space.plan_for(params)
        return self.ev.prior_score(plan) if self.fits(plan.groups) else math.inf

    def score_ahead(self, moves: Sequence[dict[str, Any]]) -> None:
        """Score the moves' plans in one go (their new grids, then their kernels: the
        oracle's and :meth:`Evaluator.prefetch`), so that each :meth:`mutant_cost` after
        finds its score made: the same score, fewer model calls."""
        self.ev.prefetch(self._plans_ahead(moves))

    def prior_ahead(self, moves: Sequence[dict[str, Any]]) -> None:
        """As :meth:`score_ahead`, for :meth:`prior_cost`."""
        self.ev.prefetch(self._plans_ahead(moves), prior=True)

    def _plans_ahead(self, moves: Sequence[dict[str, Any]]) -> list[SpacePlan]:
        grouped = [self.space.groups_for(p) for p in moves]
        self.space.prefetch(g for groups in grouped for g in groups)
        plans = [self.space.plan_for(p) for p in moves]
        return [p for p in plans if self.fits(p.groups)]

    def tilings(self, groups: tuple[FusionGroup, ...]) -> list[tuple[str, SpacePlan]]:
        """A grouping at each model's favourite tiles: the study's model (the bilevel answer)
        and the ranking model (calibrated analytic, which never refits)."""
        return [
            ("tuned", SpacePlan(groups, tuple(self.oracle.best(g)[0] for g in groups))),
            ("ranked", SpacePlan(groups, tuple(self.oracle.grid(g)[0] for g in groups))),
        ]

    def measure(self, plan: SpacePlan, source: str) -> Candidate:
        """A plan measured on the simulator (each plan runs once: the evaluator caches), as a
        candidate from ``source``. In safe mode the plan is checked first: kernels that fail
        are unfused in what is measured (``source`` gains ``, safe``) and their signatures
        are forbidden in the study from then on (:meth:`forbid`)."""
        if self.safety is not None:
            with self.clock.phase("safe mode"):
                checked = self.safety(plan)
                self.forbid(checked.failed)
            if checked.plan != plan:
                plan, source = checked.plan, f"{source}, safe"
            self.checks[plan.key()] = dict(checked.counts)
        with self.clock.phase("measurement"):
            return Candidate(plan, self.ev.measure(plan), source)

    def forbid(self, failed: Mapping[str, KernelVerdict]) -> None:
        """Make kernel signatures that failed verification constraints of the study: its
        trials are repaired around them from now on, and the study's storage keeps them
        (signature -> the ops of a group that failed and its verdict), so a resumed study,
        or another worker, starts from them."""
        new = {k: v for k, v in failed.items() if k not in self.space.forbidden}
        if not new:
            return
        for sig, v in new.items():
            log.info("kernel %s (%s) may not fuse from here on: %s", sig, v.ops, v.verdict)
        stored = dict(self.study.user_attrs.get(FORBIDDEN, {}))
        stored.update({k: {"ops": list(v.ops), "verdict": v.verdict} for k, v in new.items()})
        self.space.forbid({k: v.verdict for k, v in new.items()})
        self.study.set_user_attr(FORBIDDEN, stored)

    def sync_forbidden(self) -> None:
        """Take up the signatures the study's storage forbids (from earlier runs or other
        workers)."""
        stored = self.study.user_attrs.get(FORBIDDEN, {})
        self.space.forbid({k: str(v.get("verdict", "")) for k, v in stored.items()})

    def is_measured(self, plan: SpacePlan) -> bool:
        """Is the plan among the study's own measured candidates?"""
        return plan.key() in self.measured

    def at_every_bucket(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """Shape ranges: the search weighed a few representative buckets; from here on every
        bucket weighs its own traffic, and the best candidates (by what the search measured)
        are measured at every bucket: the pick is among them (failed ones stay listed). One
        shape, or a search that had every bucket: the candidates as they are."""
        ev = self.ev
        if not isinstance(ev, RangeEvaluator) or not ev.finish():
            return list(candidates)
        ok = sorted(
            (c for c in candidates if c.measured.ok), key=lambda c: (c.latency_us, c.plan.key())
        )
        firsts: dict[str, Candidate] = {}  # a plan measured twice (two sources) once
        for c in ok:
            firsts.setdefault(c.plan.key(), c)
        best = list(firsts.values())[:FINAL]
        with self.clock.phase("measurement"):
            again = [
                Candidate(c.plan, ev.measure(c.plan), f"{c.source}, every bucket") for c in best
            ]
        return again + [c for c in candidates if not c.measured.ok]

    def record(self, plan: SpacePlan, source: str) -> Candidate:
        """Measure a plan and keep it among the study's own candidates (trials, descents,
        hedges); a plan recorded before keeps its first source."""
        key = plan.key()
        if key not in self.measured:
            self.measured[key] = self.measure(plan, source)
        return self.measured[key]


def _evaluator(
    graph: Graph,
    target: Target,
    model: CostModel,
    config: TuneConfig,
    name: str,
    sname: str,
    buckets: BucketGraphs | None,
) -> Evaluator | RangeEvaluator:
    """The study's evaluator: of one graph, or of every bucket of its shape ranges."""
    kw: dict[str, Any] = {"retrain_every": config.retrain_every, "family": name, "study": sname}
    if buckets is None:
        return Evaluator(graph, target, model, **kw)
    return RangeEvaluator(
        buckets, target, model, config.policy, search_buckets=config.search_buckets, **kw
    )


_NO_STUDY = (
    "--trials 0 picks the plan from study '{}' in '{}', which has no such study; "
    "run it with --trials N >= 1 first (or give --study and --storage of an existing one)"
)


def _require_file(config: TuneConfig) -> None:
    """A ``--trials 0`` run on a journal file that is not there: the error, before opening
    the storage would make an empty file."""
    journal = journal_path(config.storage)
    if journal is not None and not journal.is_file():
        name = config.study or "the model's study"
        raise AutotuneError(_NO_STUDY.format(name, journal))


def _dataset_path(config: TuneConfig, storage_name: str) -> Path:
    """Where the run's measured rows go: ``--dataset``, else beside a journal file."""
    if config.dataset is not None:
        return Path(config.dataset)
    if "://" in storage_name:
        return Path("autotune.measurements.parquet")
    return Path(storage_name).with_suffix(".measurements.parquet")


@contextlib.contextmanager
def dropped_on_failure(
    storage: optuna.storages.BaseStorage | str, name: str, done: int
) -> Iterator[None]:
    """On a failure inside (an error, Ctrl-C), a study this run created (``done`` = 0) and
    the study of its measured plans are deleted where no trial of theirs completed."""
    try:
        yield
    except BaseException:
        if not done:
            drop_if_empty(storage, [name, measured_name(name)])
        raise
