"""Each named step of the tuning loop on its own (autotune.tuner.steps), and the records."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import optuna
import pytest

from autotune.exceptions import AutotuneError
from autotune.tuner import Candidate, MeasureResult, TuneConfig, TuneResult, steps, tune_graph
from autotune.tuner.session import Session
from costmodel.exceptions import SimulationError
from costmodel.spec import load_target
from search_space import load_graph
from search_space.rules import Policy
from search_space.space import peak_live_bytes
from search_space.zoo import build

WAITING = optuna.trial.TrialState.WAITING


@pytest.fixture(scope="module")
def graph():
    return load_graph(build("bert-base", weights="inputs", layers=1, scale=0.25))


def _session(graph, tmp_path: Path, **kw) -> Session:
    base = {
        "trials": 6,
        "measure_every": 3,
        "cost": "analytic",
        "storage": str(tmp_path / "s.journal"),
        "policy": Policy(safe_mode=False),
    }
    return Session.open(graph, TuneConfig(**{**base, **kw}), "bert")


def _groupings(plan) -> list[tuple[str, ...]]:
    return sorted(g.ops for g in plan.groups)


def test_warm_start_enqueues_none_greedy_and_max_once(graph, tmp_path) -> None:
    s = _session(graph, tmp_path)
    steps.warm_start(s)
    waiting = [t for t in s.study.trials if t.state == WAITING]
    assert len(waiting) == 3
    plans = [
        s.space.suggest(optuna.trial.FixedTrial(t.system_attrs["fixed_params"])) for t in waiting
    ]
    for plan, kind in zip(plans, ("none", "greedy", "max"), strict=True):
        assert _groupings(plan) == _groupings(s.baselines[kind]), kind
    steps.run_trials(s)
    again = _session(graph, tmp_path)  # resumed: its trials are there, nothing is enqueued
    steps.warm_start(again)
    assert not again.fresh and not [t for t in again.study.trials if t.state == WAITING]


def test_the_objective_is_the_study_models_score_and_memory_the_constraint(graph, tmp_path):
    s = _session(graph, tmp_path, policy=Policy(safe_mode=False, max_mem_usage=10**6))
    s.study.optimize(steps.objective(s), n_trials=4)
    for t in s.complete():
        plan = s.replay(t)
        assert t.values[0] == pytest.approx(s.ev.score(plan), rel=1e-12)
        assert t.user_attrs["plan_key"] == plan.key()
        assert t.user_attrs["kernels"] == len(plan.groups)
        memory = peak_live_bytes(graph, plan.groups)
        assert t.user_attrs["constraint"] == [memory - 10**6]


def test_measure_best_measures_the_best_fresh_trials_once_each(graph, tmp_path) -> None:
    s = _session(graph, tmp_path, measure_top=2)
    steps.warm_start(s)
    s.study.optimize(steps.objective(s), n_trials=6)
    steps.measure_best(s)
    first = dict(s.measured)
    assert 1 <= len(first) <= 2
    best = s.ranked(s.complete())[0]
    assert any(c.source == f"trial {best.number}" for c in first.values()) or any(
        c.plan.key() == best.user_attrs["plan_key"] for c in first.values()
    )
    steps.measure_best(s)  # the next best ones, never a plan again
    assert set(first) <= set(s.measured) and len(s.measured) <= 4
    for c in s.measured.values():
        assert c.measured.ok and c.latency_us == s.ev.measure(c.plan).latency_us


def test_measure_best_never_measures_a_trial_over_the_memory_limit(graph, tmp_path) -> None:
    s = _session(graph, tmp_path, policy=Policy(safe_mode=False, max_mem_usage=1))
    steps.warm_start(s)
    s.study.optimize(steps.objective(s), n_trials=5)
    steps.measure_best(s)
    assert s.measured == {}


def test_local_search_enqueues_the_models_descent_from_a_stalled_incumbent(graph, tmp_path):
    s = _session(graph, tmp_path, sampler="random")
    steps.warm_start(s)
    s.study.optimize(steps.objective(s), n_trials=14)
    incumbent = s.ranked(s.complete())[0]
    if s.complete()[-1].number - incumbent.number < 10:
        pytest.skip("the incumbent is too recent to mutate in this draw")
    steps.local_search(s)
    waiting = [t.system_attrs["fixed_params"] for t in s.study.trials if t.state == WAITING]
    assert waiting
    assert s.mutant_cost(waiting[0]) <= s.mutant_cost(incumbent.params) + 1e-9


def test_a_descent_end_is_recorded_with_where_it_came_from(graph, tmp_path) -> None:
    s = _session(graph, tmp_path)
    s.study.enqueue_trial(
        s.space.params_for([frozenset([n]) for n in s.ctx.nodes], "default")
    )  # the unfused plan: a descent in the model fuses something
    s.study.optimize(steps.objective(s), n_trials=1)
    start = s.complete()[0]
    steps.measure_descent(s, start)
    (cand,) = s.measured.values()
    assert cand.source == f"trial {start.number}, descended"
    assert s.mutant_cost(start.params) > s.ev.score(cand.plan) - 1e-9
    assert len(cand.plan.groups) < len(s.replay(start).groups)


def test_the_prior_hedge_measures_where_the_prior_descends(graph, tmp_path, monkeypatch):
    """With the prior replaced by the kernel count, its descent from a trial ends on fewer
    kernels; the hedge records it as a candidate "by the prior"."""
    from autotune.tuner import Evaluator

    monkeypatch.setattr(Evaluator, "prior_score", lambda self, plan: float(len(plan.groups)))
    s = _session(graph, tmp_path, cost="learned")
    s.study.enqueue_trial(s.space.params_for([frozenset([n]) for n in s.ctx.nodes], "default"))
    s.study.optimize(steps.objective(s), n_trials=1)
    start = s.complete()[0]
    steps.hedge_prior(s, start)
    hedged = [c for c in s.measured.values() if c.source.endswith("by the prior")]
    assert hedged and all(len(c.plan.groups) < len(s.replay(start).groups) for c in hedged)


def test_polish_descends_from_the_best_trials_only(graph, tmp_path) -> None:
    s = _session(graph, tmp_path, polish=1)
    s.study.enqueue_trial(s.space.params_for([frozenset([n]) for n in s.ctx.nodes], "default"))
    s.study.optimize(steps.objective(s), n_trials=1)
    steps.polish(s)
    assert [c.source for c in s.measured.values()] == ["trial 0, descended"]
    off = _session(graph, tmp_path, polish=0, study="off")
    off.study.optimize(steps.objective(off), n_trials=1)
    steps.polish(off)
    assert off.measured == {}


def test_rule_based_candidates_are_greedy_max_and_each_grouping_at_both_tilings(graph, tmp_path):
    s = _session(graph, tmp_path)
    out = steps.rule_based(s)
    sources = [c.source for c in out]
    assert sources[:2] == ["greedy", "max"]
    assert _groupings(out[0].plan) == _groupings(s.baselines["greedy"])
    for label in ("greedy groups", "max groups"):
        tiles = [c for c in out if c.source.startswith(label)]
        assert {c.source.rsplit(", ", 1)[1] for c in tiles} == {"tuned tiles", "ranked tiles"}
        assert len({_groupings(c.plan).__repr__() for c in tiles}) == 1
    assert [c.source for c in steps.rule_based(s, regroup=False)] == ["greedy", "max"]
    assert all(c.measured.ok for c in out)


def test_settle_starts_from_the_winners_grouping(graph, tmp_path, monkeypatch) -> None:
    """With the study's model replaced by minus the kernel count, the descent from the winner
    splits groups: every settled plan has more kernels than the winner."""
    from autotune.tuner import Evaluator

    s = _session(graph, tmp_path)
    winner = s.measure(s.baselines["max"], "max")
    monkeypatch.setattr(Evaluator, "score", lambda self, plan: -float(len(plan.groups)))
    settled = steps.settle(s, winner)
    assert settled
    for c in settled:
        assert c.source.startswith("max, settled in the model, ")
        assert len(c.plan.groups) > len(winner.plan.groups)


def test_pick_takes_the_fastest_measured_plan_and_never_a_failed_one(graph, tmp_path) -> None:
    s = _session(graph, tmp_path)
    plan = s.baselines["max"]
    fast = Candidate(plan, MeasureResult(10.0), "fast")
    slow = Candidate(plan, MeasureResult(20.0), "slow")
    broken = Candidate(plan, MeasureResult(None, "SimulationError: deadlock"), "broken")
    winner, kept, pareto = steps.pick(s, [slow, broken, fast])
    assert winner is fast and pareto == [] and broken in kept
    with pytest.raises(AutotuneError, match="no candidate plan could be simulated"):
        steps.pick(s, [broken])


def test_pick_keeps_the_leanest_plan_when_none_fits_the_memory_limit(graph, tmp_path) -> None:
    s = _session(graph, tmp_path, policy=Policy(safe_mode=False, max_mem_usage=1))
    lean, fat = s.baselines["max"], s.baselines["none"]
    assert peak_live_bytes(graph, lean.groups) < peak_live_bytes(graph, fat.groups)
    winner, _, _ = steps.pick(
        s, [Candidate(fat, MeasureResult(1.0), "fat"), Candidate(lean, MeasureResult(2.0), "lean")]
    )
    assert winner.source == "lean"


def test_a_measure_result_is_a_latency_or_an_error() -> None:
    assert MeasureResult(3.0).ok and not MeasureResult(None, "boom").ok
    with pytest.raises(ValueError):
        MeasureResult(None)
    with pytest.raises(ValueError):
        MeasureResult(1.0, "both")
    failed = Candidate(None, MeasureResult(None, "boom"), "x")  # type: ignore[arg-type]
    assert failed.latency_us == math.inf


def test_a_simulation_that_fails_fails_its_candidate_not_the_study(graph, tmp_path, monkeypatch):
    """The max plan's simulation raises (as a deadlock would): the study still ends, with
    that candidate listed as failed, and the answer is another plan."""
    from costmodel.simulator import SimulatorModel

    s = _session(graph, tmp_path)
    max_ops = {g.ops for g in s.baselines["max"].groups if len(g.ops) > 1}
    real = SimulatorModel.evaluate

    def deadlocks(self, kernels):
        if {k.ops for k in kernels if len(k.ops) > 1} == max_ops:
            raise SimulationError("simulator deadlock: planted")
        return real(self, kernels)

    monkeypatch.setattr(SimulatorModel, "evaluate", deadlocks)
    cfg = dataclasses.replace(s.config, study="deadlock", storage=str(tmp_path / "d.journal"))
    result = tune_graph(graph, cfg, name="bert")
    cands = result.plan.meta["candidates"]
    failed = [c for c in cands if c.get("error")]
    assert any(c["source"] == "max" for c in failed)
    assert all(c["simulated_us"] is None and "deadlock" in c["error"] for c in failed)
    assert result.plan.meta["source"] not in {c["source"] for c in failed}
    assert math.isfinite(result.best_latency_us)


def test_a_tune_result_is_frozen(graph, tmp_path) -> None:
    result = tune_graph(graph, _session(graph, tmp_path).config, name="bert")
    assert isinstance(result, TuneResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.best_latency_us = 0.0  # type: ignore[misc]
    assert result.to_json()["speedup_vs_none_simulated"] == pytest.approx(
        result.baseline_us["none"] / result.best_latency_us
    )
    assert load_target().spec.name == result.plan.target


def test_a_failed_plan_within_the_memory_limit_leaves_the_answer_to_one_that_ran(graph, tmp_path):
    """The only plan within max_mem_usage failed to simulate: the answer is the leanest plan
    that ran (with the warning), not an error; the failure stays listed."""
    s = _session(graph, tmp_path, policy=Policy(safe_mode=False, max_mem_usage=1))
    lean, fat = s.baselines["max"], s.baselines["none"]
    broken = Candidate(lean, MeasureResult(None, "SimulationError: deadlock"), "lean-failed")
    ran = Candidate(fat, MeasureResult(5.0), "fat-ran")
    winner, listed, _ = steps.pick(s, [broken, ran])
    assert winner is ran and broken in listed


def test_rule_based_regroups_the_best_plan_that_ran(graph, tmp_path) -> None:
    s = _session(graph, tmp_path)
    s.measured["x"] = Candidate(s.baselines["none"], MeasureResult(None, "boom"), "trial 9")
    s.measured["y"] = Candidate(s.baselines["greedy"], MeasureResult(7.0), "trial 4")
    sources = [c.source for c in steps.rule_based(s)]
    assert any(src.startswith("trial 4: groups") for src in sources)
    assert not any(src.startswith("trial 9") for src in sources)
