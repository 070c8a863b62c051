"""The tuning loop (DESIGN §7): an Optuna study over the fusion space, scored by the analytic
model, with the most promising plans measured on the simulator; the best *measured* plan wins.

Storage: a journal file in the working directory by default (safe for several processes on one
machine), or any Optuna storage URL (SQLite, PostgreSQL, ...). Running the same command again
resumes the study: completed trials are kept, and the sampler seed moves on so random start-up
trials are not replayed. Evaluations are cached by plan hash (many trials repair to one plan).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.exceptions import AutotuneError
from autotune.tune.evaluator import COSTS, Evaluator, make_study_model
from autotune.tune.study import (
    SAMPLERS,
    descend,
    enqueue_neighbours,
    knee,
    make_sampler,
    open_storage,
    picked,
)
from costmodel.analytic import AnalyticModel
from costmodel.learned import LearnedModel
from costmodel.oracle import CostOracle
from costmodel.spec import Target, load_target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph
from search_space.rules import Policy
from search_space.space import (
    FusionPlan,
    PlanGroup,
    SpacePlan,
    baseline_plan,
    build_space,
    peak_live_bytes,
)

__all__ = ["SAMPLERS", "TuneConfig", "TuneResult", "open_storage", "tune_graph"]

log = logging.getLogger(__name__)
OBJECTIVES = ("latency", "latency,memory")
RESCORE = 15  # after a refit, the best trials by stored value re-ranked by the model as it is
DESCENT = 8  # moves a descent in the model alone may make (local search, hedge, polish)


@dataclass(frozen=True)
class TuneConfig:
    """Everything `autotune tune` takes besides the model (flags map one to one)."""

    target: str = "ascend910b"
    sets: tuple[str, ...] = ()
    precision: str = "auto"
    trials: int = 120
    timeout: float | None = None
    sampler: str = "tpe"
    strategy: str = "bilevel"
    objective: str = "latency"
    storage: str | None = None
    study: str | None = None
    seed: int = 0
    measure_every: int = 20
    measure_top: int = 3
    pick: int | None = None
    cost: str = "learned"
    cost_model_file: str | None = None
    retrain_every: int = 32
    polish: int = 1
    dataset: str | None = None
    policy: Policy = field(default_factory=Policy)


@dataclass
class TuneResult:
    """What a study produced: the winning plan and how it compares."""

    plan: FusionPlan
    study: str
    storage: str
    trials: int
    best_latency_us: float
    baseline_us: dict[str, float]
    predicted_us: float
    pareto: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    report: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        base = self.baseline_us
        return {
            "best_latency_us": self.best_latency_us,
            "predicted_us": self.predicted_us,
            "baseline_us": base,
            "speedup_vs_none": base["none"] / self.best_latency_us,
            "speedup_vs_greedy": base["greedy"] / self.best_latency_us,
            "trials": self.trials,
            "study": self.study,
            "storage": self.storage,
            "pareto": self.pareto,
            "interrupted": self.interrupted,
            "report": self.report,
            "plan": self.plan.to_json(),
        }


def _constraint(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    """Peak live bytes over the policy's max_mem_usage (<= 0 is feasible)."""
    return trial.user_attrs.get("constraint", [0.0])


def _plan_record(
    graph: Graph,
    plan: SpacePlan,
    target: Target,
    name: str,
    predicted: float,
    measured: float,
    meta: dict[str, Any],
    verdicts: dict[tuple[str, ...], str] | None = None,
    cost_model: str = "analytic",
) -> FusionPlan:
    verdicts = verdicts or {}
    groups = tuple(
        PlanGroup(g.ops, g.kind, c, verdicts.get(g.ops, ""))
        for g, c in zip(plan.groups, plan.configs, strict=True)
    )
    return FusionPlan(
        fingerprint=graph.fingerprint(),
        target=target.spec.name,
        groups=groups,
        precision=target.precision,
        name=name,
        predicted_us=predicted,
        measured_us=measured,
        cost_model=cost_model,
        meta=meta,
    )


def tune_graph(
    graph: Graph,
    config: TuneConfig,
    *,
    name: str = "model",
    progress: Callable[[int, float], None] | None = None,
    safety: Callable[[SpacePlan], tuple[SpacePlan, dict[str, int], dict[tuple[str, ...], str]]]
    | None = None,
) -> TuneResult:
    """Run (or resume) a study on ``graph`` and return the best measured plan.

    Args:
        graph: the model.
        config: study settings.
        name: a readable model name for the study and the plan.
        progress: called after each trial with (trials done, best score so far).
        safety: verification hook (safe mode): returns the plan with failing kernels unfused
            and the report counts.

    Raises:
        AutotuneError: bad settings (sampler, objective, storage...).
    """
    if config.objective not in OBJECTIVES:
        raise AutotuneError(
            f"unknown objective '{config.objective}'; available: {', '.join(OBJECTIVES)}"
        )
    if config.trials < 1 or config.measure_every < 1 or config.measure_top < 1:
        raise AutotuneError("--trials and --measure-every must be >= 1 (and measure_top >= 1)")
    if config.polish < 0:
        raise AutotuneError(f"--polish must be >= 0, but got {config.polish}")
    if config.retrain_every < 1:
        raise AutotuneError(f"--retrain-every must be >= 1, but got {config.retrain_every}")
    if config.cost not in COSTS:
        raise AutotuneError(f"unknown cost model '{config.cost}'; available: {', '.join(COSTS)}")
    multi = config.objective == "latency,memory"
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own progress bar reports
    target = load_target(config.target, config.sets, config.precision)
    policy = config.policy
    ctx = FusionContext(graph, policy.no_fusion_ops, policy.max_fused_ops)
    model = make_study_model(config.cost, target, config.cost_model_file)
    storage, storage_name = open_storage(config.storage)
    numeric = config.sampler in ("cmaes", "gp")
    study_name = config.study or (
        f"{name}-{graph.fingerprint()[:8]}-{target.spec.name}-{config.strategy}"
        f"{'-mo' if multi else ''}{'-num' if numeric else ''}"
        f"{'' if config.cost == 'learned' else '-' + config.cost}"
    )
    ev = Evaluator(
        graph, target, model, retrain_every=config.retrain_every, family=name, study=study_name
    )
    dataset = _dataset_path(config, storage_name)
    if ev.load_rows(dataset):
        ev.retrain(force=True)  # a resumed study continues from what it had learned
    # grids are ranked by the calibrated analytic model, which does not learn: a config index
    # keeps its meaning across refits and resumes; costs and best configs use the study's model
    oracle = CostOracle(
        graph,
        target,
        model=model,  # type: ignore[arg-type]
        ctx=ctx,
        rank_model=AnalyticModel(target),
    )
    space = build_space(ctx, oracle, policy, strategy=config.strategy, numeric=numeric)
    directions = [optuna.study.StudyDirection.MINIMIZE] * (2 if multi else 1)
    try:
        probe = optuna.create_study(
            storage=storage, study_name=study_name, directions=directions, load_if_exists=True
        )
    except ValueError as err:  # e.g. an existing study with other directions
        raise AutotuneError(f"study '{study_name}': {err}") from None
    done = len(probe.trials)
    study = optuna.load_study(
        storage=storage,
        study_name=study_name,
        sampler=make_sampler(config.sampler, config.seed, done, multi),
    )
    baselines = {k: baseline_plan(k, ctx, oracle, policy) for k in ("none", "greedy", "max")}
    if done == 0:
        parts = {
            k: [frozenset(n for n in g.ops if n in ctx.index) for g in p.groups]
            for k, p in baselines.items()
        }
        for kind in ("none", "greedy", "max"):
            params = space.params_for(parts[kind], "default" if kind != "max" else "best")
            study.enqueue_trial(params, skip_if_exists=True)

    def objective(trial: optuna.trial.Trial) -> float | tuple[float, float]:
        plan = space.suggest(trial)
        trial.set_user_attr("plan_key", plan.key())
        trial.set_user_attr("kernels", len(plan.groups))
        trial.set_user_attr("cost_model", ev.model.version)
        latency = ev.score(plan)
        memory = peak_live_bytes(graph, plan.groups)
        trial.set_user_attr("peak_live_bytes", memory)
        if policy.max_mem_usage is not None:
            trial.set_user_attr("constraint", [memory - policy.max_mem_usage])
            trial.set_constraint("max_mem_usage", memory - policy.max_mem_usage)
        return (latency, memory / 1e6) if multi else latency

    # plan key -> (simulated us, the plan as measured, where from). The plan itself is kept:
    # replaying a bilevel trial after a refit may pick other configs than the ones measured
    measured: dict[str, tuple[float, SpacePlan, str]] = {}
    replayed: set[int] = set()

    def replay(t: optuna.trial.FrozenTrial) -> SpacePlan:
        return space.suggest(optuna.trial.FixedTrial(t.params))

    def now(t: optuna.trial.FrozenTrial) -> float:
        """A trial's score under the study's model as it is now: a value stored before the
        last refit came from another model (cached by plan and model version)."""
        if t.user_attrs.get("cost_model") == ev.model.version or "plan_key" not in t.user_attrs:
            return float(t.values[0])
        return ev.score(replay(t))

    def current_order(trials: Sequence[optuna.trial.FrozenTrial]) -> list:
        """Trials by stored value, the ``RESCORE`` best of them re-ordered by their score now."""
        by_value = sorted(trials, key=lambda t: t.values[0])
        return sorted(by_value[:RESCORE], key=now) + by_value[RESCORE:]

    def measure_best(hedging: bool = True) -> None:
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        ranked = (
            current_order(complete)
            if not multi
            else sorted(study.best_trials, key=lambda t: t.values[0])
        )
        fresh = 0
        for t in ranked:
            if t.number in replayed or "plan_key" not in t.user_attrs or _constraint(t)[0] > 0:
                continue
            replayed.add(t.number)
            plan = replay(t)
            if plan.key() in measured:
                continue
            measured[plan.key()] = (ev.measure(plan), plan, f"trial {t.number}")
            fresh += 1
            if fresh >= config.measure_top:
                break
        if hedge and hedging and ranked:
            hedge_prior(ranked[0])
        if ev.retrain():
            oracle.refresh()  # bilevel configs follow the refitted model

    state: dict[str, float] = {"n": 0, "best": math.inf}
    blocks = space.block_moves()
    swaps = space.swap_moves()

    def fits(groups: Sequence[FusionGroup]) -> bool:
        """Within the policy's max_mem_usage (always, without one)."""
        limit = policy.max_mem_usage
        return limit is None or peak_live_bytes(graph, groups) <= limit

    def mutant_cost(params: dict[str, Any]) -> float:
        """The study model's cost of a local-search mutation (fusion decisions only; each
        group at its best or default config, as :meth:`SearchSpace.plan` picks); ``inf`` over
        the memory limit, which would drop the plan anyway."""
        plan = space.plan(space.chosen(params))
        return ev.score(plan) if fits(plan.groups) else math.inf

    def prior_cost(params: dict[str, Any]) -> float:
        """As :func:`mutant_cost`, under the calibrated analytic model (the learned model's
        prior, which its correction may mislead far from the rows it was fitted on)."""
        plan = space.plan(space.chosen(params))
        return ev.prior_score(plan) if fits(plan.groups) else math.inf

    # a learned study hedges: where its prior's descents end is measured too (extra
    # simulator runs, no trial), so a correction that steers the walk away from a good
    # grouping is tested and, through the refit, mended
    hedge = isinstance(ev.model, LearnedModel) and not multi

    def measure_descent(
        t: optuna.trial.FrozenTrial,
        cost: Callable[..., float],
        moves: Sequence[tuple[str, str]] = (),
        still: bool = False,
    ) -> None:
        """Measure where a descent under ``cost`` (with the swap ``moves``) from trial ``t``
        ends, unless its plan was measured already, it is over the memory limit or (without
        ``still``) it did not move."""
        start = t.params
        end, _ = descend(start, cost, blocks, DESCENT, config.seed, swaps=moves)
        plan = space.plan(space.chosen(end))
        if (end is start and not still) or plan.key() in measured or not fits(plan.groups):
            return
        by = "" if cost is mutant_cost else " by the prior"
        how = f"descended{by}" if end is not start else f"as it is{by}"
        measured[plan.key()] = (ev.measure(plan), plan, f"trial {t.number}, {how}")

    def hedge_prior(incumbent: optuna.trial.FrozenTrial) -> None:
        """Measure where descents under the prior end: from the incumbent, and from the trial
        the prior itself scores best (its grouping measured even where it cannot descend), so
        a grouping the correction ranks too low is still measured and learned from. These
        descents try swap moves, the study model's own do not: scoring every exchange under
        the study's model (each a new group to tile) made a learned study several times
        slower (only the final :func:`settle` does, once)."""
        measure_descent(incumbent, prior_cost, swaps)
        done = [
            t
            for t in study.trials
            if t.state == optuna.trial.TrialState.COMPLETE and "plan_key" in t.user_attrs
        ]
        if done:
            favourite = min(done, key=lambda t: prior_cost(t.params))
            if favourite.number != incumbent.number:
                measure_descent(favourite, prior_cost, swaps, still=True)

    def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        state["n"] += 1
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.values:
            state["best"] = min(state["best"], trial.values[0])
        if int(state["n"]) % config.measure_every == 0:
            measure_best()
        if int(state["n"]) % 10 == 0 and not multi:
            complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
            best = current_order(complete)[0] if complete else None
            enqueue_neighbours(
                study,
                blocks=blocks,
                seed=config.seed,
                incumbent=best,
                score=mutant_cost,
                depth=DESCENT,
            )
        if progress is not None:
            progress(int(state["n"]), state["best"])

    def polish() -> None:
        """The final polish: from each of the ``config.polish`` best trials under the model as
        it is now, a descent in the model alone (and, for a learned study, the prior's hedge:
        :func:`hedge_prior`; no trial spent); each end that is a new plan within the memory
        limit is measured. The last local-search round may come too late for the walk to follow
        it, and the refitted model knows most about the plans near the best."""
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        tops = [t for t in current_order(complete) if "plan_key" in t.user_attrs]
        for t in tops[: config.polish]:
            measure_descent(t, mutant_cost)
            if hedge:
                hedge_prior(t)

    def tilings(groups: tuple[FusionGroup, ...]) -> list[tuple[str, SpacePlan]]:
        """A grouping at each model's favourite tiles: the study's model (the bilevel answer)
        and the ranking model (calibrated analytic, which never refits)."""
        return [
            ("tuned", SpacePlan(groups, tuple(oracle.best(g)[0] for g in groups))),
            ("ranked", SpacePlan(groups, tuple(oracle.grid(g)[0] for g in groups))),
        ]

    def settle(winner: tuple[float, SpacePlan, str]) -> list[tuple[float, SpacePlan, str]]:
        """The measured winner's grouping descended in the study's model and (a learned study)
        under its prior, with swap moves, each end measured at both tilings. The winner may be
        no trial (a rule-based grouping at the ranking tiles), so no descent has started from
        it, and an exchange one swap away can still lower it."""
        parts = [frozenset(n for n in g.ops if n in ctx.index) for g in winner[1].groups]
        start = space.params_for(parts)
        costs = [(mutant_cost, "in the model")] + ([(prior_cost, "by the prior")] if hedge else [])
        out: list[tuple[float, SpacePlan, str]] = []
        for cost, how in costs:
            end, _ = descend(start, cost, blocks, DESCENT, config.seed, swaps=swaps)
            groups = space.plan(space.chosen(end)).groups
            if end is start or not fits(groups):
                continue
            for tiles, plan in tilings(groups):  # measured once each (a plan both pick too)
                out.append((ev.measure(plan), plan, f"{winner[2]}, settled {how}, {tiles} tiles"))
        return out

    interrupted = False
    try:
        study.optimize(
            objective,
            n_trials=config.trials,
            timeout=config.timeout,
            callbacks=[callback],
            catch=(Exception,),
        )
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted: writing the best plan found so far")
    measure_best(hedging=False)  # the polish below hedges at the end
    if not multi and not interrupted:
        polish()
    candidates: list[tuple[float, SpacePlan, str]] = list(measured.values())
    base_us = {k: ev.measure(baselines[k]) for k in ("none", "greedy")}
    candidates.append((base_us["greedy"], baselines["greedy"], "greedy"))
    max_plan = baselines["max"]
    candidates.append((ev.measure(max_plan), max_plan, "max"))
    # the rule-based groupings and the best measured grouping at both tilings (a plan both
    # pick is measured once)
    best_trial = min(measured.values(), key=lambda m: m[0], default=None)
    regroup = [("greedy groups", baselines["greedy"].groups), ("max groups", max_plan.groups)]
    if best_trial is not None:
        regroup.append((f"{best_trial[2]}: groups", best_trial[1].groups))
    if multi or interrupted:
        regroup = []  # a Pareto pick replaces every candidate below; Ctrl-C wants out now
    regroup = [r for r in regroup if fits(r[1])]  # never simulate a plan the limit will drop
    for label, groups in regroup:
        for tiles, plan in tilings(groups):
            candidates.append((ev.measure(plan), plan, f"{label}, {tiles} tiles"))
    counted = [c for c in candidates if fits(c[1].groups)]  # the limit drops the others
    if counted and not multi and not interrupted:
        candidates += settle(min(counted, key=lambda c: c[0]))
    pareto = []
    if multi:
        front = sorted(study.best_trials, key=lambda t: t.values[0])
        pareto = [
            {"trial": t.number, "latency_us": t.values[0], "memory_mb": t.values[1]} for t in front
        ]
        if front:
            pick = knee(front) if config.pick is None else picked(front, config.pick)
            plan = replay(pick)
            candidates = [(ev.measure(plan), plan, f"trial {pick.number}")]
    if policy.max_mem_usage is not None:  # plans over the memory limit are not candidates
        within = [c for c in candidates if fits(c[1].groups)]
        if not within:
            log.warning("no measured plan fits max_mem_usage; keeping the leanest")
            within = [min(candidates, key=lambda c: peak_live_bytes(graph, c[1].groups))]
        candidates = within
    best_us, best_plan, source = min(candidates, key=lambda c: c[0])
    report: dict[str, int] = {}
    verdicts: dict[tuple[str, ...], str] = {}
    if safety is not None and policy.safe_mode:
        best_plan, report, verdicts = safety(best_plan)
        best_us = ev.measure(best_plan)
    report = {**_census(graph, target, policy), **report}
    report.setdefault("fused", sum(1 for g in best_plan.groups if len(g.ops) > 1))
    trials = sum(1 for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
    meta = {
        "study": study_name,
        "storage": storage_name,
        "trials": trials,
        "target_source": config.target,
        "sets": list(config.sets),
        "sampler": config.sampler,
        "strategy": config.strategy,
        "seed": config.seed,
        "source": source,
        "candidates": [
            {"source": c[2], "measured_us": c[0], "kernels": len(c[1].groups)} for c in candidates
        ],
        "baseline_us": base_us,
        "baseline_predicted_us": {k: ev.score(baselines[k]) for k in ("none", "greedy")},
        "objective": config.objective,
        "report": report,
    }
    meta["kernels"] = _kernel_rows(ev, oracle, ctx, best_plan)
    meta["cost_model"] = {"kind": config.cost, "version": ev.model.version, "refits": ev.refits}
    meta["measurements"] = {"rows": len(ev.rows), "file": str(dataset)}
    ev.save_rows(dataset)
    record = _plan_record(
        graph,
        best_plan,
        target,
        name,
        ev.score(best_plan),
        best_us,
        meta,
        verdicts,
        cost_model=config.cost,
    )
    return TuneResult(
        record,
        study_name,
        storage_name,
        trials,
        best_us,
        base_us,
        ev.score(best_plan),
        pareto,
        interrupted,
        report,
    )


def _dataset_path(config: TuneConfig, storage_name: str) -> Path:
    """Where the run's measured rows go: ``--dataset``, else beside a journal file."""
    if config.dataset is not None:
        return Path(config.dataset)
    if "://" in storage_name:
        return Path("autotune.measurements.parquet")
    return Path(storage_name).with_suffix(".measurements.parquet")


def _kernel_rows(
    ev: Evaluator, oracle: CostOracle, ctx: FusionContext, plan: SpacePlan
) -> list[dict[str, Any]]:
    """Per kernel of the final plan: simulated latency and bound, and what its ops cost unfused
    (each op alone at its default config), for the report."""
    kernels = ev.kernels(plan)
    costs = ev.simulator.evaluate(kernels)
    rows = []
    for g, k, c in zip(plan.groups, kernels, costs, strict=True):
        ops = [n for n in g.ops if n in ctx.index]
        before = sum(oracle.default_cost(ctx.group([n])) for n in ops)
        rows.append(
            {
                "us": c.latency_us,
                "us_unfused": before,
                "bound": c.bound,
                "unit": k.unit,
                "footprint": dict(k.footprint),
            }
        )
    return rows


def _census(graph: Graph, target: Target, policy: Policy) -> dict[str, int]:
    """How many candidate fusions were skipped for low benefit or buffer overflow."""
    from autotune.candidates import analyse_candidates

    verdicts = [c["verdict"] for c in analyse_candidates(graph, target, policy)["candidates"]]
    return {
        "skipped_low_benefit": verdicts.count("skip: below benefit_threshold"),
        "skipped_buffer_overflow": verdicts.count("skip: buffer overflow"),
    }
