"""The named steps of a study (:func:`autotune.tuner.loop.tune_graph` calls them in order).

* :func:`warm_start`: enqueue the none, greedy and max plans in a new study;
* :func:`objective`: a trial's plan, scored by the study's model (and its peak memory);
* :class:`OnTrial`: after each trial, every ``measure_every`` trials :func:`measure_best`,
  every ten :func:`local_search`;
* :func:`measure_best`: simulate the best trials not yet measured, hedge, refit;
* :func:`local_search`: enqueue the model's descent from the incumbent (TVM-style mutation);
* :func:`hedge_prior`: measure where descents under the learned model's prior end;
* :func:`polish`: at the end, descend from the best trials and measure the ends;
* :func:`rule_based`: the greedy and max plans, and the best groupings at both tilings;
* :func:`settle`: descend from the measured winner's grouping, with swap moves;
* :func:`pick`: the answer among the measured candidates (Pareto knee for two objectives,
  plans within the memory limit, failed measurements never);
* :func:`safe_pick` (safe mode): the candidates, fastest first, and the greedy baseline each
  verified, failing kernels unfused and the result measured, before they compete.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import optuna

from autotune.exceptions import AutotuneError
from autotune.progress import LOGGER
from autotune.tuner.annotate import ORIGIN, describe_trial
from autotune.tuner.journal import batched_params
from autotune.tuner.leases import Lease, reap
from autotune.tuner.pareto import knee, picked
from autotune.tuner.records import Candidate
from autotune.tuner.safety import Safety
from autotune.tuner.search import descend, enqueue_neighbours
from autotune.tuner.session import COMPLETE, Session
from search_space.space import peak_live_bytes

__all__ = [
    "DESCENT",
    "OnTrial",
    "hedge_prior",
    "local_search",
    "measure_best",
    "measure_descent",
    "objective",
    "pick",
    "polish",
    "rule_based",
    "run_trials",
    "safe_pick",
    "settle",
    "warm_start",
]

log = logging.getLogger(__name__)
DESCENT = 8  # moves a descent in the model alone may make (local search, hedge, polish)
LOCAL_EVERY = 10  # trials between local-search rounds
SAFE_CHECKS = 6  # candidates safe mode verifies at most, fastest first


def warm_start(s: Session) -> None:
    """In a new study, enqueue the none, greedy and max plans as its first trials."""
    if not s.fresh:
        return
    for kind in ("none", "greedy", "max"):
        parts = [frozenset(n for n in g.ops if n in s.ctx.index) for g in s.baselines[kind].groups]
        params = s.space.params_for(parts, "default" if kind != "max" else "best")
        s.study.enqueue_trial(params, {ORIGIN: f"warm start: {kind}"}, skip_if_exists=True)


def objective(s: Session) -> Callable[[optuna.trial.Trial], float | tuple[float, float]]:
    """The study's objective: a trial's plan scored by the study's model (with its peak
    live bytes as the second objective, and as a constraint under ``max_mem_usage``)."""
    limit = s.config.policy.max_mem_usage

    def run(trial: optuna.trial.Trial) -> float | tuple[float, float]:
        try:
            with Lease(trial):
                return scored(trial)
        except KeyboardInterrupt:  # Ctrl-C: this trial is dropped, not failed with a traceback
            s.interrupted = True
            s.study.stop()
            raise optuna.TrialPruned() from None

    def scored(trial: optuna.trial.Trial) -> float | tuple[float, float]:
        with batched_params(trial.storage):  # one write for the trial's parameters
            plan = s.space.suggest(trial)
        trial.set_user_attr("plan_key", plan.key())
        trial.set_user_attr("kernels", len(plan.groups))
        trial.set_user_attr("cost_model", s.ev.model.version)
        latency = s.ev.score(plan)
        describe_trial(s, trial, plan)
        memory = peak_live_bytes(s.graph, plan.groups)
        trial.set_user_attr("peak_live_bytes", memory)
        if limit is not None:
            trial.set_user_attr("constraint", [memory - limit])
            trial.set_constraint("max_mem_usage", memory - limit)
        return (latency, memory / 1e6) if s.config.multi else latency

    return run


def _over_limit(t: optuna.trial.FrozenTrial) -> bool:
    return float(t.user_attrs.get("constraint", [0.0])[0]) > 0


def measure_best(s: Session, hedging: bool = True) -> None:
    """Simulate up to ``measure_top`` of the best trials whose plans are not measured yet
    (ranked by the model as it is now; the Pareto front for two objectives), hedge a learned
    study's prior from the incumbent, and refit the learned model on the new rows. Signatures
    other workers forbade in the meantime are taken up first, and trials of workers that
    are gone failed and retried."""
    s.sync_forbidden()
    reap(s.study)
    if s.config.multi:
        ranked = sorted(s.study.best_trials, key=lambda t: t.values[0])
    else:
        ranked = s.ranked(s.complete())
    fresh = 0
    for t in ranked:
        if t.number in s.replayed or "plan_key" not in t.user_attrs or _over_limit(t):
            continue
        s.replayed.add(t.number)
        plan = s.replay(t)
        if s.is_measured(plan):
            continue
        s.record(plan, f"trial {t.number}")
        fresh += 1
        if fresh >= s.config.measure_top:
            break
    if s.hedges and hedging and ranked:
        hedge_prior(s, ranked[0])
    with s.clock.phase("refit"):
        if s.ev.retrain():
            s.oracle.refresh()  # bilevel configs follow the refitted model


def local_search(s: Session) -> None:
    """Enqueue the study model's descent from the incumbent (single objective only)."""
    complete = s.complete()
    best = s.ranked(complete)[0] if complete else None
    with s.clock.phase("local search"):
        enqueue_neighbours(
            s.study,
            blocks=s.blocks,
            swaps=s.swaps,
            seed=s.config.seed,
            incumbent=best,
            score=s.mutant_cost,
            depth=DESCENT,
            user_attrs={ORIGIN: "local search"},
            prepare=s.score_ahead,
        )


class OnTrial:
    """The study's callback: measurement and local search on schedule, and progress."""

    def __init__(self, s: Session, progress: Callable[[int, float], None] | None) -> None:
        self.s, self.progress = s, progress
        self.n, self.best = 0, math.inf
        # patience counts from the study's best so far (a resumed study's too)
        self.gainless, self.study_best = (
            0,
            min((t.values[0] for t in s.complete() if t.values), default=math.inf),
        )

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.n += 1
        if trial.state == COMPLETE and trial.values:
            self.best = min(self.best, trial.values[0])
        self._patience(study, trial)
        if self.n % self.s.config.measure_every == 0:
            measure_best(self.s)
        if self.n % LOCAL_EVERY == 0 and not self.s.config.multi:
            local_search(self.s)
        if self.progress is not None:
            self.progress(self.n, self.best)

    def _patience(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """With ``patience`` (``--trials auto``), stop the study once that many trials in a
        row have not improved its best predicted value."""
        value = trial.values[0] if trial.state == COMPLETE and trial.values else math.inf
        if value < self.study_best:
            self.study_best, self.gainless = value, 0
        else:
            self.gainless += 1
        patience = self.s.config.patience
        if patience and self.gainless >= patience and not self.s.config.multi:
            told = logging.getLogger(LOGGER)
            told.info("no gain in the last %d trials: the search has converged", patience)
            study.stop()


def run_trials(s: Session, progress: Callable[[int, float], None] | None = None) -> bool:
    """Run the study's trials (a trial that raises is recorded as failed; the study goes on).

    Returns:
        True when Ctrl-C ended the trials early.
    """
    try:
        s.study.optimize(
            objective(s),
            n_trials=s.config.trials,
            timeout=s.config.timeout,
            callbacks=[OnTrial(s, progress)],
            catch=(Exception,),
        )
    except KeyboardInterrupt:  # between trials (a measurement, a callback, the sampler)
        s.interrupted = True
    if s.interrupted:
        log.info("interrupted: writing the best plan found so far")
    return s.interrupted


def measure_descent(
    s: Session,
    t: optuna.trial.FrozenTrial,
    prior: bool = False,
    moves: Sequence[tuple[str, str]] = (),
    still: bool = False,
) -> None:
    """Measure where a descent from trial ``t`` ends (under the prior, or the study's model;
    with the swap ``moves``), unless its plan was measured already, it is over the memory
    limit or (without ``still``) it did not move."""
    start = t.params
    cost, ahead = (s.prior_cost, s.prior_ahead) if prior else (s.mutant_cost, s.score_ahead)
    end, _ = descend(start, cost, s.blocks, DESCENT, s.config.seed, swaps=moves, prepare=ahead)
    plan = s.space.plan(s.space.chosen(end))
    if (end is start and not still) or s.is_measured(plan) or not s.fits(plan.groups):
        return
    by = " by the prior" if prior else ""
    how = f"descended{by}" if end is not start else f"as it is{by}"
    s.record(plan, f"trial {t.number}, {how}")


def hedge_prior(s: Session, incumbent: optuna.trial.FrozenTrial) -> None:
    """Measure where descents under the prior end: from the incumbent, and from the trial the
    prior itself scores best (its grouping measured even where it cannot descend), so a
    grouping the correction ranks too low is still measured and learned from."""
    measure_descent(s, incumbent, prior=True, moves=s.swaps)
    done = [t for t in s.complete() if "plan_key" in t.user_attrs]
    if done:
        s.prior_ahead([t.params for t in done])
        favourite = min(done, key=lambda t: s.prior_cost(t.params))
        if favourite.number != incumbent.number:
            measure_descent(s, favourite, prior=True, moves=s.swaps, still=True)


def polish(s: Session) -> None:
    """From each of the ``polish`` best trials under the model as it is now, a descent in the
    model alone (and, for a learned study, the prior's hedge); each new end within the memory
    limit is measured. The last local-search round may come too late for the trials to follow
    it, and the refitted model knows most about the plans near the best."""
    tops = [t for t in s.ranked(s.complete()) if "plan_key" in t.user_attrs]
    for t in tops[: s.config.polish]:
        measure_descent(s, t, moves=s.swaps)
        if s.hedges:
            hedge_prior(s, t)


def rule_based(s: Session, regroup: bool = True) -> list[Candidate]:
    """The greedy and max plans as candidates and, with ``regroup``, the greedy and max
    groupings and the best measured grouping each at both tilings (plans over the memory limit
    are never simulated)."""
    greedy, max_plan = s.baselines["greedy"], s.baselines["max"]
    out = [s.measure(greedy, "greedy"), s.measure(max_plan, "max")]
    ran = [c for c in s.measured.values() if c.measured.ok]
    best = min(ran, key=lambda c: c.latency_us, default=None)
    groupings = [("greedy groups", greedy.groups), ("max groups", max_plan.groups)]
    if best is not None:
        groupings.append((f"{best.source}: groups", best.plan.groups))
    for label, groups in groupings if regroup else []:
        if not s.fits(groups):
            continue
        for tiles, plan in s.tilings(groups):
            out.append(s.measure(plan, f"{label}, {tiles} tiles"))
    return out


def settle(s: Session, winner: Candidate) -> list[Candidate]:
    """The measured winner's grouping descended in the study's model and (a learned study)
    under its prior, with swap moves, each end measured at both tilings. The winner may be no
    trial (a rule-based grouping at the ranking tiles), so no descent has started from it, and
    an exchange one swap away can still lower it."""
    parts = [frozenset(n for n in g.ops if n in s.ctx.index) for g in winner.plan.groups]
    start = s.space.params_for(parts)
    costs = [(s.mutant_cost, s.score_ahead, "in the model")]
    if s.hedges:
        costs.append((s.prior_cost, s.prior_ahead, "by the prior"))
    out = []
    for cost, ahead, how in costs:
        end, _ = descend(
            start, cost, s.blocks, DESCENT, s.config.seed, swaps=s.swaps, prepare=ahead
        )
        groups = s.space.plan(s.space.chosen(end)).groups
        if end is start or not s.fits(groups):
            continue
        for tiles, plan in s.tilings(groups):
            out.append(s.measure(plan, f"{winner.source}, settled {how}, {tiles} tiles"))
    return out


def pick(
    s: Session, candidates: list[Candidate]
) -> tuple[Candidate, list[Candidate], list[dict[str, float]]]:
    """The answer: the fastest measured candidate within the memory limit (the leanest, with a
    warning, when none fits); for two objectives, the Pareto front's knee or ``--pick``.

    Returns:
        The winner, the candidates it was picked from, and the Pareto front (two objectives).

    Raises:
        AutotuneError: no candidate could be simulated, or ``--pick`` is not on the front.
    """
    pareto: list[dict[str, float]] = []
    if s.config.multi:
        front = sorted(s.study.best_trials, key=lambda t: t.values[0])
        pareto = [
            {"trial": t.number, "predicted_us": t.values[0], "memory_mb": t.values[1]}
            for t in front
        ]
        if front:
            chosen = knee(front) if s.config.pick is None else picked(front, s.config.pick)
            candidates = [s.measure(s.replay(chosen), f"trial {chosen.number}")]
    pool = [c for c in candidates if c.measured.ok]  # a failed simulation never competes
    if not pool:
        errors = "; ".join(f"{c.source}: {c.measured.error}" for c in candidates[:3])
        raise AutotuneError(f"no candidate plan could be simulated ({errors})")
    if s.config.policy.max_mem_usage is not None:
        within = [c for c in pool if s.fits(c.plan.groups)]
        if not within:
            log.warning("no measured plan fits max_mem_usage; keeping the leanest")
            within = [min(pool, key=lambda c: peak_live_bytes(s.graph, c.plan.groups))]
        pool = within
    listed = [c for c in candidates if not c.measured.ok or c in pool]  # failures stay listed
    # ties go by plan key, so every worker (whatever order it met them in) picks the same
    return min(pool, key=lambda c: (c.latency_us, c.plan.key())), listed, pareto


def safe_pick(
    s: Session, winner: Candidate, candidates: Sequence[Candidate], check: Safety
) -> tuple[Candidate, dict[str, int], dict[tuple[str, ...], str], Candidate]:
    """Safe mode before the candidates compete: the picked winner and then the next fastest
    measured candidates (within the memory limit, up to ``SAFE_CHECKS``) are each verified,
    their failing kernels unfused and the result measured, until no unchecked candidate is
    faster than the best safe plan so far (a plan made safe is seldom faster than it was, so
    the checks stop there); the fastest safe plan wins. The greedy baseline goes through the
    same check, so the plan is compared with what greedy would be under safe mode. Two
    objectives keep the Pareto pick: only it is made safe. A study with safe mode on has
    checked every plan as it measured it (:meth:`Session.measure`), so here each check finds
    its verdicts cached and the plan unchanged; a candidate measured without the check is
    made safe here.

    Returns:
        The safe winner, its report counts and verdicts, and the safe greedy plan.
    """
    rest = sorted(
        (c for c in candidates if c.measured.ok and c is not winner and s.fits(c.plan.groups)),
        key=lambda c: (c.latency_us, c.plan.key()),
    )
    queue = [winner] if s.config.multi else [winner, *rest][:SAFE_CHECKS]
    best: tuple[Candidate, dict[str, int], dict[tuple[str, ...], str]] | None = None
    for c in queue:
        if best is not None and c.latency_us >= best[0].latency_us:
            break
        checked = check(c.plan)
        s.forbid(checked.failed)
        safe = c if checked.plan == c.plan else s.measure(checked.plan, f"{c.source}, safe")
        if safe.measured.ok and (best is None or safe.latency_us < best[0].latency_us):
            best = (safe, checked.counts, checked.verdicts)
    if best is None:
        raise AutotuneError("no safe plan could be simulated")
    greedy = s.baselines["greedy"]
    safe_greedy = check(greedy).plan
    label = "greedy" if safe_greedy == greedy else "greedy, safe"
    return (*best, s.measure(safe_greedy, label))
