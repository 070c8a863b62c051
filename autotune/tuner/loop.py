"""The tuning loop (docs/tuning.md): an Optuna study over the fusion space, scored by the study's
cost model, with the most promising plans measured on the simulator; the best *measured* plan
wins.

Storage: a journal file in the working directory by default (safe for several processes on one
machine), or any Optuna storage URL (SQLite, PostgreSQL, ...). Running the same command again
resumes the study: completed trials are kept, and the sampler seed moves on so random start-up
trials are not replayed. Evaluations are cached by plan hash (many trials repair to one plan).

The loop reads as its steps (:mod:`autotune.tuner.steps`): warm start, trials (with measurement,
refits and local search on schedule), a last measurement, polish, the rule-based candidates,
settle, pick, safe mode, the code-generation check, and the plan record. In safe mode every plan
is verified before it is measured, and a kernel signature that fails is forbidden in the space for
the trials after; the plan the study outputs also has its generated kernels checked
(:mod:`autotune.tuner.safety_codegen`, once: Triton's CPU interpreter is slow).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence

import optuna

from autotune.progress import LOGGER, Teller
from autotune.tuner import steps
from autotune.tuner.annotate import describe_outcome, describe_study, plot_parity
from autotune.tuner.clock import Clock
from autotune.tuner.config import TuneConfig
from autotune.tuner.ledger import publish, stored
from autotune.tuner.output import census, no_work, plan_record
from autotune.tuner.records import Candidate, TuneResult
from autotune.tuner.safety import Safety
from autotune.tuner.safety_codegen import codegen_safe, require_codegen_extra
from autotune.tuner.session import Session
from autotune.tuner.study import check_params, opening
from search_space.ir import Graph, empty_tensors
from search_space.shapes import BucketGraphs

__all__ = ["since_best", "tune_graph"]


def _search(
    s: Session, progress: Callable[[int, float], None] | None
) -> tuple[list[Candidate], bool]:
    """Trials, polish, the rule-based candidates and settle: every candidate measured, each
    written to the study's storage (:func:`~autotune.tuner.ledger.publish`) so that any worker
    picks from all of them; and whether the run was interrupted."""
    clock = s.clock
    with clock.phase("trials"):
        steps.warm_start(s)
        interrupted = steps.run_trials(s, progress)
        steps.measure_best(s, hedging=False)  # the polish below hedges at the end
    searching = not s.config.multi and not interrupted  # Ctrl-C wants out now
    if searching:
        with clock.phase("polish"):
            steps.polish(s)
    candidates: list[Candidate] = list(s.measured.values())
    with clock.phase("rule-based"):
        s.measure(s.baselines["none"], "none")  # a baseline, not a candidate
        candidates += steps.rule_based(s, regroup=searching)
    counted = [c for c in candidates if s.fits(c.plan.groups) and c.measured.ok]
    if counted and searching:
        with clock.phase("settle"):
            candidates += steps.settle(s, min(counted, key=lambda c: c.latency_us))
    with clock.phase("pick"):
        publish(s, candidates)
    return candidates, interrupted


def tune_graph(
    graph: Graph,
    config: TuneConfig,
    *,
    name: str = "model",
    progress: Callable[[int, float], None] | None = None,
    safety: Safety | None = None,
    on_phase: Callable[[str], None] | None = None,
    buckets: BucketGraphs | None = None,
) -> TuneResult:
    """Run (or resume) a study on ``graph`` and return the best measured plan (a model with
    an empty tensor does no work: each op alone, no study).

    Args:
        graph, config: the model (with ``buckets``, the top bucket's graph); study settings.
        buckets: shape ranges: one set of fusion decisions for every bucket, each bucket at
            its own configs, the objective their traffic-weighted sum (:mod:`.ranges`).
        name: a readable model name for the study and the plan.
        progress, on_phase: told (trials done, best predicted) after each trial; the phase
            (both are also logged: :mod:`autotune.progress`).
        safety: verification hook (safe mode): every plan the study measures is checked
            first, with its failing kernels unfused, and their signatures are forbidden in
            the study's space from then on; the output plan's generated code is checked too
            (as the policy's ``codegen_check`` says).

    Raises:
        AutotuneError: bad settings (sampler, objective, storage...), ``codegen_check = on``
            without the [codegen] extra, or no plan simulated.
    """
    config.check()
    if safety is not None:
        require_codegen_extra(config.policy)
    if empty_tensors(graph):
        return no_work(graph, config, name)
    if buckets is not None and graph is not buckets.reference:
        raise ValueError("with buckets, graph must be the top bucket's (buckets.reference)")
    with one_blas_thread():
        return _open_and_tune(graph, config, name, progress, safety, on_phase, buckets)


def one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """BLAS and OpenMP pools held to one thread for a study: its numerics are many small
    arrays (safe mode's checks on 64-row slices, the simulator, the closed form's batches),
    where a pool's threads spin-wait for work. Beside two busy processes on a 2-core
    machine, bert-base's `make run` tuned in 67 s with them and 44 s without, its safe mode
    30-40 s against 11 s; idle, 25.8 against 26.5 s (`experiments/bench_first_run.py`)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def _open_and_tune(
    graph: Graph,
    config: TuneConfig,
    name: str,
    progress: Callable[[int, float], None] | None,
    safety: Safety | None,
    on_phase: Callable[[str], None] | None,
    buckets: BucketGraphs | None = None,
) -> TuneResult:
    """Open (or resume) the study, then run it (:func:`_tune`), its studies dropped again
    where it fails before any trial of a study it made completes."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own progress bar reports
    told = Teller(config.trials, on_phase, progress)  # and logged, for those without a bar
    clock = Clock(told.phase)
    with clock.phase("setup"):
        s = Session.open(graph, config, name, safety, buckets)
    with s.dropped_on_failure():  # before "resuming": a study of another space is the one line
        check_params(s.study, set(s.space.param_of.values()))
    logging.getLogger(LOGGER).info(opening(s.study, s.storage_name, s.done))
    s.clock = clock
    with s.dropped_on_failure(), _verdicts(s, safety):
        return _tune(s, told.trial, safety)


def _verdicts(s: Session, safety: Safety | None) -> contextlib.AbstractContextManager[object]:
    """Safe mode's verdicts kept across studies of the model (beside the storage)."""
    if safety is None or not s.config.policy.safe_mode:
        return contextlib.nullcontext()
    from autotune.tuner.verdict_store import kept, store_path

    return kept(safety.known, safety.scope, store_path(s.storage_name))


def _tune(
    s: Session, progress: Callable[[int, float], None] | None, safety: Safety | None
) -> TuneResult:
    """The study's run after its set-up: trials, the pick, safe mode, the code-generation
    check and the plan record."""
    config, clock = s.config, s.clock
    with clock.phase("setup"):
        describe_study(s)
    candidates, interrupted = _search(s, progress) if config.trials else ([], False)
    with clock.phase("pick"):
        candidates += stored(s, candidates)  # other workers' and earlier runs' plans
        if not candidates:  # --trials 0 on a study that measured nothing yet
            candidates = steps.rule_based(s, regroup=False)
        candidates = s.at_every_bucket(candidates)  # shape ranges: measured at every bucket
        winner, candidates, pareto = steps.pick(s, candidates)
        baseline_us = {
            k: s.measure(s.baselines[k], k).measured.latency_us for k in ("none", "greedy")
        }
    compared_with = {"none": "none", "greedy": "greedy"}
    report: dict[str, int] = {}
    verdicts: dict[tuple[str, ...], str] = {}
    if safety is not None and config.policy.safe_mode:
        with clock.phase("safe mode"):
            winner, report, verdicts, greedy = steps.safe_pick(s, winner, candidates, safety)
        baseline_us["greedy"] = greedy.measured.latency_us
        compared_with["greedy"] = greedy.source
    with clock.phase("codegen check"):
        winner, report, verdicts, codegen = codegen_safe(s, winner, safety, report, verdicts)
    with clock.phase("report"):
        report = {**census(s), **report, "forbidden": len(s.space.forbidden)}
        report.setdefault("fused", sum(1 for g in winner.plan.groups if len(g.ops) > 1))
        record = plan_record(s, winner, candidates, baseline_us, report, verdicts, compared_with)
        describe_outcome(s, winner, candidates, baseline_us)  # and the measured study
        plot_parity(s, record)
        s.ev.save_rows(s.dataset)
    meta = {**record.meta, "codegen_check": codegen, "timing_s": clock.seconds()}
    record = dataclasses.replace(record, meta=meta)
    return TuneResult(
        plan=record,
        study=s.study_name,
        storage=s.storage_name,
        trials=len(s.complete()),
        best_latency_us=winner.latency_us,
        baseline_us=baseline_us,
        predicted_us=s.ev.score(winner.plan),
        pareto=tuple(pareto),
        interrupted=interrupted,
        report=report,
        optimal_predicted_us=s.study.user_attrs.get("baselines_predicted_us", {}).get("optimal"),
        trials_since_best=None if config.multi else since_best(s.complete()),
    )


def since_best(trials: Sequence[optuna.trial.FrozenTrial]) -> int:
    """Complete trials (in the order they ran) after the last one that improved the best
    value: 0 when the last trial is the best so far."""
    best, since = float("inf"), 0
    for t in sorted(trials, key=lambda t: t.number):
        if t.values and t.values[0] < best:
            best, since = t.values[0], 0
        else:
            since += 1
    return since
