"""Studies under a learned or analytic cost: refits, measured candidates, the prior's hedges."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import optuna
import pytest
from tuner_helpers import _cfg, bert_graph

from autotune.exceptions import AutotuneError
from autotune.tuner import tune_graph


@pytest.fixture(scope="module")
def graph():
    return bert_graph()


def test_learned_cost_refits_on_measured_rows_and_resumes_from_them(graph, tmp_path) -> None:
    from costmodel.measure import kernel_from_json, read_table
    from costmodel.registry import make_cost_model
    from costmodel.spec import load_target

    cfg = _cfg(tmp_path, study="learn", trials=12, measure_every=4, retrain_every=8)
    result = tune_graph(graph, cfg, name="bert")
    meta = result.plan.meta
    assert result.plan.cost_model == "learned" and meta["cost_model"]["refits"] >= 1
    rows = read_table(meta["measurements"]["file"])
    assert len(rows) == meta["measurements"]["rows"] > 0
    assert set(rows["source"]) == {"tune:learn"}
    # the first row is the first measured plan's first kernel: it ran on a cold L2, so it
    # costs exactly what the simulator says of it alone
    first = kernel_from_json(json.loads(rows["kernel"].iloc[0]))
    assert not any(json.loads(rows["resident"].iloc[0]))
    sim = make_cost_model("simulator", load_target("ascend910b"))
    assert sim.evaluate([first])[0].latency_us == pytest.approx(rows["latency_us"].iloc[0])
    assert (rows["latency_us"] > 0).all()
    study = optuna.load_study(
        study_name="learn",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(cfg.storage)
        ),
    )
    versions = {t.user_attrs["cost_model"] for t in study.trials if "cost_model" in t.user_attrs}
    assert len(versions) >= 2  # trials after a refit were scored by the refitted model
    again = tune_graph(
        graph, _cfg(tmp_path, study="learn", trials=2, measure_every=4), name="bert"
    )
    assert again.plan.meta["measurements"]["rows"] >= len(rows)  # resumed with what it had


def test_analytic_cost_is_available_and_unknown_cost_is_refused(graph, tmp_path) -> None:
    result = tune_graph(graph, _cfg(tmp_path, cost="analytic", trials=4), name="bert")
    assert result.plan.cost_model == "analytic" and result.plan.meta["cost_model"]["refits"] == 0
    with pytest.raises(
        AutotuneError, match="unknown cost model 'xgb'; available: analytic, learned, simulator"
    ):
        tune_graph(graph, _cfg(tmp_path, cost="xgb"), name="bert")
    with pytest.raises(AutotuneError, match="--retrain-every must be >= 1"):
        tune_graph(graph, _cfg(tmp_path, retrain_every=0), name="bert")


def test_saved_plan_is_the_measured_plan_when_the_model_refits_often(graph, tmp_path) -> None:
    from autotune.estimate import estimate_graph

    cfg = _cfg(tmp_path, study="refit", trials=12, measure_every=3, retrain_every=1)
    result = tune_graph(graph, cfg, name="bert")
    assert result.plan.meta["cost_model"]["refits"] >= 2
    path = result.plan.save(tmp_path / "plan.json")
    again = estimate_graph(graph, model_name="m", plan=str(path), cost="simulator")
    assert again.latency_us == pytest.approx(result.best_latency_us, rel=1e-9)


@pytest.fixture(scope="module")
def unsafe_study(graph, tmp_path_factory: pytest.TempPathFactory):
    """A learned study with safe mode off, whose answer two tests check."""
    from search_space.rules import Policy

    folder = tmp_path_factory.mktemp("unsafe")
    cfg = _cfg(folder, study="cands", trials=8, policy=Policy(safe_mode=False))
    return tune_graph(graph, cfg, name="bert")


def test_the_answer_is_the_best_measured_candidate(unsafe_study) -> None:
    """Every plan measured as a candidate is listed with its simulated latency; the answer is
    the cheapest of them (before safe mode, off here)."""
    result = unsafe_study
    cands = result.plan.meta["candidates"]
    assert {"greedy", "max"} <= {c["source"] for c in cands}
    assert result.best_latency_us == min(c["simulated_us"] for c in cands)
    assert result.plan.meta["source"] in {c["source"] for c in cands}


@pytest.mark.parametrize("cost", ["learned", "analytic"])
def test_a_learned_study_measures_where_its_prior_descends(graph, tmp_path, monkeypatch, cost):
    """A learned study also measures the end of a descent under its prior (the calibrated
    analytic model) from the incumbent and from the trial the prior scores best, and from its
    best trials at the end; an analytic study has no prior to hedge with. The prior here is
    replaced by the kernel count, so each such descent ends on fewer kernels than the trial it
    started from, and the fewest kernels of any trial are measured."""
    from autotune.tuner import Evaluator
    from search_space.rules import Policy

    monkeypatch.setattr(Evaluator, "prior_score", lambda self, plan: float(len(plan.groups)))
    cfg = _cfg(tmp_path, study="prior", trials=8, cost=cost, policy=Policy(safe_mode=False))
    result = tune_graph(graph, cfg, name="bert")
    cands = result.plan.meta["candidates"]
    kernels = {c["source"]: c["n_kernels"] for c in cands}
    hedged = [c for c in cands if c["source"].endswith("descended by the prior")]
    assert bool(hedged) == (cost == "learned")
    starts = [c["source"].split(",")[0] for c in hedged]  # "trial N"
    checked = [(c, s) for c, s in zip(hedged, starts, strict=True) if s in kernels]
    assert checked or cost == "analytic"  # the incumbent is measured first, so some start is
    for c, start in checked:
        assert c["n_kernels"] < kernels[start]
    if cost == "learned":
        journal = optuna.storages.journal.JournalFileBackend(cfg.storage)
        storage = optuna.storages.JournalStorage(journal)
        trials = optuna.load_study(study_name=result.study, storage=storage).trials
        fewest = min(t.user_attrs["kernels"] for t in trials if "kernels" in t.user_attrs)
        by_prior = [c["n_kernels"] for c in cands if c["source"].endswith("by the prior")]
        assert min(by_prior) <= fewest


def test_a_learned_study_measures_its_priors_favourite_trial(graph, tmp_path, monkeypatch):
    """Where no descent can move (depth 0), the hedge still measures the grouping of the
    trial the prior scores best. With a prior that favours the most kernels (the unfused
    trial, which neither the study's model nor the baselines put forward), the most kernels
    of any trial are among the measured candidates."""
    from autotune.tuner import Evaluator, steps
    from search_space.rules import Policy

    monkeypatch.setattr(Evaluator, "prior_score", lambda self, plan: -float(len(plan.groups)))
    monkeypatch.setattr(steps, "DESCENT", 0)
    cfg = _cfg(tmp_path, study="favourite", trials=8, policy=Policy(safe_mode=False))
    result = tune_graph(graph, cfg, name="bert")
    journal = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(cfg.storage)
    )
    trials = optuna.load_study(study_name=result.study, storage=journal).trials
    most = max(t.user_attrs["kernels"] for t in trials if "kernels" in t.user_attrs)
    assert max(c["n_kernels"] for c in result.plan.meta["candidates"]) == most


@pytest.mark.parametrize("cost", ["learned", "analytic"])
def test_the_measured_winner_is_settled_by_a_descent_from_its_grouping(
    graph, tmp_path, monkeypatch, cost
):
    """The best measured candidate (a trial, a descent's end or a rule-based grouping) is
    itself a start: a descent from its grouping, under the prior in a learned study and in
    the model in an analytic one, is measured. With that cost replaced by minus the kernel
    count, each such settled plan has more kernels than the winner it came from."""
    from autotune.tuner import Evaluator
    from search_space.rules import Policy

    how = "by the prior" if cost == "learned" else "in the model"
    patched = "prior_score" if cost == "learned" else "score"
    monkeypatch.setattr(Evaluator, patched, lambda self, plan: -float(len(plan.groups)))
    policy = Policy(safe_mode=False)
    cfg = _cfg(tmp_path, study=f"settle-{cost}", trials=6, cost=cost, policy=policy)
    cands = tune_graph(graph, cfg, name="bert").plan.meta["candidates"]
    kernels = {c["source"]: c["n_kernels"] for c in cands}
    settled = [c for c in cands if f", settled {how}, " in c["source"]]
    assert settled
    for c in settled:
        winner = c["source"].split(", settled ")[0]
        assert winner in kernels and c["n_kernels"] > kernels[winner]
    assert cost == "learned" or not any("settled by the prior" in c for c in kernels)


def test_learned_tuning_is_never_worse_than_the_analytic_models_max_plan(graph, unsafe_study):
    """`estimate --plan max` is the max grouping with the calibrated analytic model's tiles;
    the learned study measures that plan too, so it can only end at or below it (safe mode,
    which may unfuse after the pick, is off)."""
    from autotune.estimate import estimate_graph

    result = unsafe_study
    for baseline in ("max", "greedy"):
        ref = estimate_graph(graph, model_name="m", plan=baseline, cost="simulator")
        assert result.best_latency_us <= ref.latency_us * (1 + 1e-9), baseline


def test_a_resumed_study_learns_only_from_rows_of_this_simulator(graph, tmp_path) -> None:
    """Rows measured by another simulator version (an upgrade between runs) describe other
    physics: resuming ignores them and keeps the ones this simulator measured."""
    from autotune.tuner import Evaluator
    from costmodel.measure import SIMULATOR_VERSION, measurements_of, read_table, write_table
    from costmodel.registry import make_cost_model
    from costmodel.spec import load_target

    cfg = _cfg(tmp_path, study="sims", trials=6, measure_every=3)
    result = tune_graph(graph, cfg, name="bert")
    path = result.plan.meta["measurements"]["file"]
    rows = measurements_of(read_table(path))
    assert rows and {r.provenance.measured_by for r in rows} == {SIMULATOR_VERSION}
    target = load_target("ascend910b")

    def loaded() -> int:
        ev = Evaluator(graph, target, make_cost_model("learned", target), study="sims")
        return ev.load_rows(Path(path))

    assert loaded() == len(rows)
    half = len(rows) // 2
    older = [dataclasses.replace(r.provenance, measured_by="sim-0") for r in rows[:half]]
    stale = [dataclasses.replace(r, provenance=p) for r, p in zip(rows[:half], older, strict=True)]
    write_table(stale + rows[half:], path)
    assert loaded() == len(rows) - half
