"""The tuning loop: warm starts, caching, measuring, resuming, failures, samplers, Pareto."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import optuna
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autotune.exceptions import AutotuneError
from autotune.tune import TuneConfig, descend, enqueue_neighbours, tune_graph
from autotune.zoo import build
from search_space import load_graph


@pytest.fixture(scope="module")
def graph():
    return load_graph(build("bert-base", weights="inputs", layers=2, scale=0.25))


def _cfg(tmp_path: Path, **kw) -> TuneConfig:
    base = {"trials": 12, "measure_every": 5, "storage": str(tmp_path / "s.journal")}
    return TuneConfig(**{**base, **kw})


def test_tuned_plan_is_never_worse_than_greedy_and_reports_baselines(graph, tmp_path) -> None:
    result = tune_graph(graph, _cfg(tmp_path), name="bert")
    data = result.to_json()
    for key in (
        "best_latency_us",
        "baseline_us",
        "speedup_vs_none",
        "speedup_vs_greedy",
        "trials",
        "plan",
        "study",
        "storage",
    ):
        assert key in data
    assert result.best_latency_us < result.baseline_us["none"]
    assert result.trials == 12
    # the reported latency is what the simulator says of the saved plan, re-measured from it
    from autotune.estimate import estimate_graph

    path = result.plan.save(tmp_path / "plan.json")
    again = estimate_graph(graph, model_name="m", plan=str(path), cost="simulator")
    assert again.latency_us == pytest.approx(result.best_latency_us, rel=1e-9)
    plan = result.plan
    assert plan.measured_us == result.best_latency_us and plan.fingerprint == graph.fingerprint()
    ops = sorted(o for g in plan.groups for o in g.ops if not graph.op(o).is_view)
    assert ops == sorted(op.name for op in graph.ops if not op.is_view and not op.constant)


def test_resuming_keeps_trials_and_does_not_replay_start_up(graph, tmp_path) -> None:
    cfg = _cfg(tmp_path, sampler="random", study="s1", trials=6)
    tune_graph(graph, cfg, name="bert")
    tune_graph(graph, cfg, name="bert")
    study = optuna.load_study(
        study_name="s1",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(cfg.storage)
        ),
    )
    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(trials) == 12
    first = [t.params for t in trials[3:6]]  # after the three enqueued baselines
    second = [t.params for t in trials[6:9]]
    assert first != second


def test_a_trial_that_raises_is_recorded_and_the_study_goes_on(graph, tmp_path, monkeypatch):
    from autotune.tune import evaluator

    calls = {"n": 0}
    real = evaluator.Evaluator.score

    def flaky(self, plan):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("simulated lowering bug")
        return real(self, plan)

    monkeypatch.setattr(evaluator.Evaluator, "score", flaky)
    cfg = _cfg(tmp_path, study="flaky", trials=8)
    tune_graph(graph, cfg, name="bert")
    study = optuna.load_study(
        study_name="flaky",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(cfg.storage)
        ),
    )
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.FAIL in states
    assert states.count(optuna.trial.TrialState.COMPLETE) == 7


@pytest.mark.parametrize("sampler", ["random", "cmaes", "tpe"])
def test_samplers_run(graph, tmp_path, sampler: str) -> None:
    result = tune_graph(
        graph, _cfg(tmp_path, sampler=sampler, study=sampler, trials=8), name="bert"
    )
    assert result.trials == 8


def test_gp_without_torch_and_unknown_sampler_are_clear(graph, tmp_path) -> None:
    pytest.importorskip("optuna")
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(AutotuneError, match="needs torch"):
            tune_graph(graph, _cfg(tmp_path, sampler="gp"), name="bert")
    with pytest.raises(AutotuneError, match="unknown sampler 'sa'; available: tpe"):
        tune_graph(graph, _cfg(tmp_path, sampler="sa"), name="bert")
    with pytest.raises(AutotuneError, match=r"neither a \.journal file nor an Optuna URL"):
        tune_graph(graph, _cfg(tmp_path, storage="db.sqlite"), name="bert")


def test_latency_memory_returns_a_pareto_front_and_the_knee(graph, tmp_path) -> None:
    result = tune_graph(
        graph,
        _cfg(tmp_path, objective="latency,memory", sampler="nsga2", study="mo", trials=12),
        name="bert",
    )
    assert result.pareto
    lat = [p["latency_us"] for p in result.pareto]
    mem = [p["memory_mb"] for p in result.pareto]
    assert lat == sorted(lat) and mem == sorted(mem, reverse=True)  # a real front
    with pytest.raises(AutotuneError, match="not on the Pareto front"):
        tune_graph(
            graph,
            _cfg(
                tmp_path,
                objective="latency,memory",
                sampler="nsga2",
                study="mo",
                trials=1,
                pick=10_000,
            ),
            name="bert",
        )


def test_ctrl_c_still_returns_the_best_plan(graph, tmp_path) -> None:
    def stop(n: int, best: float) -> None:
        if n == 4:
            raise KeyboardInterrupt

    result = tune_graph(graph, _cfg(tmp_path, study="ctrlc"), name="bert", progress=stop)
    assert result.interrupted and result.plan.groups
    assert result.best_latency_us <= result.baseline_us["greedy"] * (1 + 1e-9)


def test_cli_tune_json_and_report(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "tune",
            "zoo:gpt2",
            "--scale",
            "0.1",
            "--trials",
            "6",
            "--measure-every",
            "3",
            "--unsafe",
            "--json",
            "-o",
            "p.json",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["plan"] == "p.json" and (tmp_path / "p.json").exists()
    assert (tmp_path / "autotune.journal").exists()  # the embedded default storage
    rep = runner.invoke(app, ["report", "p.json", "--json"])
    assert rep.exit_code == 0, rep.output
    r = json.loads(rep.stdout)
    assert r["measured_us"] == pytest.approx(data["best_latency_us"])
    assert len(r["per_kernel"]) == len(data["plan_groups"]) if "plan_groups" in data else True
    bad = runner.invoke(app, ["tune", "zoo:gpt2", "--scale", "0.1", "-o", "nodir/p.json"])
    assert bad.exit_code == 1 and "does not exist" in bad.stderr


def test_max_mem_usage_limits_the_chosen_plan(graph, tmp_path) -> None:
    from search_space.rules import Policy
    from search_space.space import peak_live_bytes

    free = tune_graph(graph, _cfg(tmp_path, study="free"), name="bert")
    limit = 1  # no plan fits one byte: the leanest candidate is kept
    tight = tune_graph(
        graph, _cfg(tmp_path, study="tight", policy=Policy(max_mem_usage=limit)), name="bert"
    )
    from search_space.ir import make_group

    def peak(plan) -> int:
        return peak_live_bytes(graph, [make_group(graph, g.ops, g.kind) for g in plan.groups])

    assert peak(tight.plan) <= peak(free.plan)


def test_any_optuna_storage_url_works(graph, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    first = tune_graph(graph, _cfg(tmp_path, storage=url, study="rdb", trials=4), name="bert")
    second = tune_graph(graph, _cfg(tmp_path, storage=url, study="rdb", trials=4), name="bert")
    assert first.storage == url and second.trials == 8


def test_learned_cost_refits_on_measured_rows_and_resumes_from_them(graph, tmp_path) -> None:
    from costmodel.calibration import kernel_from_json, read_table
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
        AutotuneError, match="unknown cost model 'xgb'; available: learned, analytic"
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


def test_a_dataset_path_in_a_missing_folder_fails_before_the_study(tmp_path) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    res = CliRunner().invoke(
        app,
        ["tune", "zoo:bert-base", "--scale", "0.1", "--trials", "2", "--storage",
         str(tmp_path / "s.journal"), "--dataset", str(tmp_path / "no" / "rows.parquet"),
         "-o", str(tmp_path / "plan.json")],
    )  # fmt: skip
    assert res.exit_code == 1 and "does not exist" in res.output
    assert not list(tmp_path.iterdir())  # no journal, no plan


def test_the_answer_is_the_best_measured_candidate(graph, tmp_path) -> None:
    """Every plan measured as a candidate is listed with its simulated latency; the answer is
    the cheapest of them (before safe mode, off here)."""
    from search_space.rules import Policy

    cfg = _cfg(tmp_path, study="cands", trials=8, policy=Policy(safe_mode=False))
    result = tune_graph(graph, cfg, name="bert")
    cands = result.plan.meta["candidates"]
    assert {"greedy", "max"} <= {c["source"] for c in cands}
    assert result.best_latency_us == min(c["measured_us"] for c in cands)
    assert result.plan.meta["source"] in {c["source"] for c in cands}


@pytest.mark.parametrize("cost", ["learned", "analytic"])
def test_a_learned_study_measures_where_its_prior_descends(graph, tmp_path, monkeypatch, cost):
    """A learned study also measures the end of a descent under its prior (the calibrated
    analytic model) from the incumbent and from the trial the prior scores best, and from its
    best trials at the end; an analytic study has no prior to hedge with. The prior here is
    replaced by the kernel count, so each such descent ends on fewer kernels than the trial it
    started from, and the fewest kernels of any trial are measured."""
    from autotune.tune import Evaluator
    from search_space.rules import Policy

    monkeypatch.setattr(Evaluator, "prior_score", lambda self, plan: float(len(plan.groups)))
    cfg = _cfg(tmp_path, study="prior", trials=8, cost=cost, policy=Policy(safe_mode=False))
    result = tune_graph(graph, cfg, name="bert")
    cands = result.plan.meta["candidates"]
    kernels = {c["source"]: c["kernels"] for c in cands}
    hedged = [c for c in cands if c["source"].endswith("descended by the prior")]
    assert bool(hedged) == (cost == "learned")
    starts = [c["source"].split(",")[0] for c in hedged]  # "trial N"
    checked = [(c, s) for c, s in zip(hedged, starts, strict=True) if s in kernels]
    assert checked or cost == "analytic"  # the incumbent is measured first, so some start is
    for c, start in checked:
        assert c["kernels"] < kernels[start]
    if cost == "learned":
        journal = optuna.storages.journal.JournalFileBackend(cfg.storage)
        storage = optuna.storages.JournalStorage(journal)
        trials = optuna.load_study(study_name=result.study, storage=storage).trials
        fewest = min(t.user_attrs["kernels"] for t in trials if "kernels" in t.user_attrs)
        by_prior = [c["kernels"] for c in cands if c["source"].endswith("by the prior")]
        assert min(by_prior) <= fewest


def test_a_learned_study_measures_its_priors_favourite_trial(graph, tmp_path, monkeypatch):
    """Where no descent can move (depth 0), the hedge still measures the grouping of the
    trial the prior scores best. With a prior that favours the most kernels (the unfused
    trial, which neither the study's model nor the baselines put forward), the most kernels
    of any trial are among the measured candidates."""
    from autotune.tune import Evaluator, steps
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
    assert max(c["kernels"] for c in result.plan.meta["candidates"]) == most


@pytest.mark.parametrize("cost", ["learned", "analytic"])
def test_the_measured_winner_is_settled_by_a_descent_from_its_grouping(
    graph, tmp_path, monkeypatch, cost
):
    """The best measured candidate (a trial, a descent's end or a rule-based grouping) is
    itself a start: a descent from its grouping, under the prior in a learned study and in
    the model in an analytic one, is measured. With that cost replaced by minus the kernel
    count, each such settled plan has more kernels than the winner it came from."""
    from autotune.tune import Evaluator
    from search_space.rules import Policy

    how = "by the prior" if cost == "learned" else "in the model"
    patched = "prior_score" if cost == "learned" else "score"
    monkeypatch.setattr(Evaluator, patched, lambda self, plan: -float(len(plan.groups)))
    policy = Policy(safe_mode=False)
    cfg = _cfg(tmp_path, study=f"settle-{cost}", trials=6, cost=cost, policy=policy)
    cands = tune_graph(graph, cfg, name="bert").plan.meta["candidates"]
    kernels = {c["source"]: c["kernels"] for c in cands}
    settled = [c for c in cands if f", settled {how}, " in c["source"]]
    assert settled
    for c in settled:
        winner = c["source"].split(", settled ")[0]
        assert winner in kernels and c["kernels"] > kernels[winner]
    assert cost == "learned" or not any("settled by the prior" in c for c in kernels)


def test_learned_tuning_is_never_worse_than_the_analytic_models_max_plan(graph, tmp_path):
    """`estimate --plan max` is the max grouping with the calibrated analytic model's tiles;
    the learned study measures that plan too, so it can only end at or below it."""
    from autotune.estimate import estimate_graph
    from search_space.rules import Policy

    cfg = _cfg(tmp_path, study="vs-max", trials=6, policy=Policy(safe_mode=False))
    result = tune_graph(graph, cfg, name="bert")  # (safe mode may unfuse after the pick)
    for baseline in ("max", "greedy"):
        ref = estimate_graph(graph, model_name="m", plan=baseline, cost="simulator")
        assert result.best_latency_us <= ref.latency_us * (1 + 1e-9), baseline


def test_a_resumed_study_learns_only_from_rows_of_this_simulator(graph, tmp_path) -> None:
    """Rows measured by another simulator version (an upgrade between runs) describe other
    physics: resuming ignores them and keeps the ones this simulator measured."""
    from autotune.tune import Evaluator
    from costmodel.calibration import SIMULATOR_VERSION, read_table, write_table
    from costmodel.registry import make_cost_model
    from costmodel.spec import load_target

    cfg = _cfg(tmp_path, study="sims", trials=6, measure_every=3)
    result = tune_graph(graph, cfg, name="bert")
    path = result.plan.meta["measurements"]["file"]
    rows = read_table(path).to_dict("records")
    assert rows and {r["simulator_version"] for r in rows} == {SIMULATOR_VERSION}
    target = load_target("ascend910b")

    def loaded() -> int:
        ev = Evaluator(graph, target, make_cost_model("learned", target), study="sims")
        return ev.load_rows(Path(path))

    assert loaded() == len(rows)
    half = len(rows) // 2
    stale = [{**r, "simulator_version": "sim-0"} if i < half else r for i, r in enumerate(rows)]
    write_table(stale, path)
    assert loaded() == len(rows) - half


def _stalled_study(params: list[dict], values: list[float]) -> optuna.Study:
    """A study holding ``params`` as finished trials with ``values``."""
    study = optuna.create_study()
    for p, v in zip(params, values, strict=True):
        dists = {
            k: optuna.distributions.IntDistribution(0, 1)
            if isinstance(x, int) and not isinstance(x, bool)
            else optuna.distributions.CategoricalDistribution([False, True])
            for k, x in p.items()
        }
        study.add_trial(optuna.trial.create_trial(params=p, distributions=dists, value=v))
    return study


def _queued(study: optuna.Study) -> list[dict]:
    waiting = optuna.trial.TrialState.WAITING
    return [t.system_attrs["fixed_params"] for t in study.trials if t.state == waiting]


@pytest.mark.parametrize("numeric", [False, True])
def test_local_search_switches_a_whole_block_on_before_single_flips(numeric: bool) -> None:
    """Once the incumbent is stale, the first mutation fuses every class of the first block
    it leaves partly unfused (a pattern pays off only whole), then single flips follow; no
    mutation repeats a trial and the values keep the parameter's type (bool or 0/1)."""

    on, off = (1, 0) if numeric else (True, False)
    names = [f"c{i}" for i in range(8)]
    best = {f"fuse/{n}": off for n in names} | {"fuse/c0": on}
    others = [{**best, f"fuse/{n}": on} for n in names[1:6]] + [{**best, "fuse/c0": off}]
    study = _stalled_study([best, *others], [1.0] + [2.0] * len(others))
    blocks = [("c0",), ("c0", "c1", "c2"), ("c3", "c4")]  # the first is already on
    assert enqueue_neighbours(study, limit=4, stall=5, blocks=blocks) == 4
    queued = _queued(study)
    tried = [t.params for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert queued[0] == {**best, "fuse/c1": on, "fuse/c2": on}
    assert queued[1] == {**best, "fuse/c3": on, "fuse/c4": on}
    # then the single flips not tried yet: c6 and c7
    assert sorted(next(k for k in best if p[k] != best[k]) for p in queued[2:]) == [
        "fuse/c6",
        "fuse/c7",
    ]
    assert all(sum(p[k] != best[k] for k in best) == 1 for p in queued[2:])
    assert all(p not in tried for p in queued)
    assert len({tuple(sorted(p.items())) for p in queued}) == len(queued)
    assert all(type(v) is type(on) for p in queued for v in p.values())


def test_local_search_waits_while_the_sampler_improves_and_its_flips_follow_the_seed() -> None:

    names = [f"c{i:02d}" for i in range(40)]
    best = {f"fuse/{n}": False for n in names}
    fresh = _stalled_study([best] * 3, [3.0, 2.0, 1.0])  # the best is the newest trial
    assert enqueue_neighbours(fresh, stall=2) == 0
    picks = []
    for seed in (0, 0, 1):
        study = _stalled_study([best] * 4, [1.0, 2.0, 2.0, 2.0])
        enqueue_neighbours(study, limit=3, stall=3, seed=seed)
        picks.append([next(k for k, v in p.items() if v) for p in _queued(study)])
    assert picks[0] == picks[1] != picks[2]


def test_local_search_mutates_the_incumbent_it_is_given() -> None:
    """The tuner passes the best trial under the model as it is now (a refit may reorder the
    trials): the mutations are of that trial, and its age decides whether the study stalled."""

    names = [f"c{i}" for i in range(6)]
    a = {f"fuse/{n}": False for n in names}
    b = {**a, "fuse/c5": True}
    study = _stalled_study([a, b, *([{**a, "fuse/c4": True}] * 4)], [1.0, 3.0] + [4.0] * 4)
    assert enqueue_neighbours(study, limit=2, stall=10, incumbent=study.trials[1]) == 0
    assert enqueue_neighbours(study, limit=2, stall=4, incumbent=study.trials[1]) == 2
    for p in _queued(study):
        assert sum(p[k] != b[k] for k in b) == 1  # one flip away from b, not from a


def test_local_search_with_a_score_enqueues_the_cheapest_mutations() -> None:
    """Given the study model's cost of a mutation, the local search spends its trials on the
    cheapest untried ones, whatever the default order (blocks first) says."""

    names = [f"c{i}" for i in range(8)]
    best = {f"fuse/{n}": False for n in names}
    study = _stalled_study([best, *([{**best, "fuse/c0": True}] * 5)], [1.0] + [2.0] * 5)
    blocks = [("c1", "c2"), ("c3", "c4")]
    scored: list[dict] = []

    def cost(p: dict) -> float:
        scored.append(p)
        return 0.0 if p["fuse/c7"] else 5.0 - sum(p.values())  # c7 best, then bigger moves

    assert enqueue_neighbours(study, limit=3, stall=3, blocks=blocks, score=cost) == 3
    queued = _queued(study)
    assert queued[0] == {**best, "fuse/c7": True}
    assert {tuple(sorted(k for k, v in p.items() if v)) for p in queued[1:]} == {
        ("fuse/c1", "fuse/c2"),
        ("fuse/c3", "fuse/c4"),
    }
    assert {"fuse/c0": True} not in [{k: v for k, v in p.items() if v} for p in scored]
    assert len(scored) == 2 + 7  # both blocks and every untried flip, each scored once


def _linear(weights: list[float]):
    """A cost linear in the fusion bits: its minimum is every bit with a negative weight on."""
    return lambda p: sum(w for w, k in zip(weights, sorted(p), strict=True) if p[k])


@st.composite
def _linear_problem(draw: st.DrawFn, min_size: int = 1) -> tuple[dict, list[float], dict]:
    """A start (fusion bits), the weights of a linear cost, and its brute-force minimum."""
    weights = draw(
        st.lists(st.floats(-4, 4).filter(lambda w: abs(w) > 1e-3), min_size=min_size, max_size=9)
    )
    names = [f"fuse/c{i}" for i in range(len(weights))]
    bits = draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
    optimum = {k: w < 0 for k, w in zip(names, weights, strict=True)}
    return dict(zip(names, bits, strict=True)), weights, optimum


@settings(max_examples=60, deadline=None)
@given(_linear_problem(min_size=2))
def test_the_descent_in_the_model_ends_at_its_optimum_and_spends_one_trial_there(
    problem: tuple[dict, list[float], dict],
) -> None:
    """Under a cost linear in the bits, steepest descent with room for every move reaches the
    brute-force minimum: it takes the first trial, the rest go to the cheapest single flips
    of the incumbent, and no trial is spent on the way."""
    best, weights, optimum = problem
    names = list(best)
    assume(optimum != best)
    cost = _linear(weights)
    study = _stalled_study([best] * 4, [1.0] * 4)
    assert enqueue_neighbours(study, limit=3, stall=3, score=cost, depth=len(names)) <= 3
    queued = _queued(study)
    assert queued[0] == optimum
    flips = [f for f in ({**best, k: not best[k]} for k in names) if f != optimum]
    assert all(f in flips for f in queued[1:])  # single flips (ties may be broken either way)
    cheapest = sorted(cost(f) for f in flips)[: len(queued) - 1]
    assert [cost(f) for f in queued[1:]] == pytest.approx(cheapest)


@settings(max_examples=60, deadline=None)
@given(_linear_problem())
def test_descend_reaches_the_minimum_of_a_linear_cost_and_never_climbs(
    problem: tuple[dict, list[float], dict],
) -> None:
    """With room for every move, steepest descent on a cost linear in the bits ends at the
    brute-force minimum, with that minimum's cost; with no room it stays put."""
    start, weights, optimum = problem
    cost = _linear(weights)
    end, value = descend(start, cost, depth=len(start))
    assert end == optimum
    assert value == pytest.approx(cost(end)) and value <= cost(start)
    assert descend(start, cost, depth=0) == (start, cost(start))


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.data())
def test_a_swap_crosses_the_ridge_that_single_flips_cannot(n: int, data: st.DataObject) -> None:
    """Two classes that share an operator, one on: fusing both or neither is dearer than
    either alone (the operator cannot sit in both groups), and the other one alone is the
    cheapest. Single flips stay put; with the pair as a swap the descent reaches it."""
    names = [f"fuse/c{i}" for i in range(n)]
    a, b = data.draw(st.sampled_from([(x, y) for x in names for y in names if x < y]))
    start = {k: data.draw(st.booleans()) for k in names} | {a: True, b: False}

    def cost(p: dict) -> float:
        others = sum(1.0 for k in names if k not in (a, b) and p[k] != start[k])  # stay put
        return others + {(True, False): 2.0, (False, True): 1.0}.get((p[a], p[b]), 3.0)

    assert descend(start, cost, depth=4) == (start, 2.0)
    end, value = descend(start, cost, depth=4, swaps=[(a[5:], b[5:])])
    assert end == {**start, a: False, b: True} and value == 1.0


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_the_descent_stops_after_depth_moves(depth: int) -> None:
    """The descent's end is at most ``depth`` moves past the cheapest mutation."""
    names = [f"fuse/c{i}" for i in range(8)]
    best = dict.fromkeys(names, False)
    study = _stalled_study([best] * 4, [1.0] * 4)
    enqueue_neighbours(study, limit=2, stall=3, score=_linear([-1.0] * 8), depth=depth)
    assert sum(_queued(study)[0].values()) == 1 + depth


def test_without_a_cheaper_move_the_descent_changes_nothing() -> None:
    """When no move from the cheapest mutation lowers the score, the trials enqueued are the
    ones the plain scored local search picks."""
    names = [f"fuse/c{i}" for i in range(6)]
    best = dict.fromkeys(names, False)

    def away(p: dict) -> float:  # every move away from the incumbent costs more
        return float(sum(p.values()))

    picks = []
    for depth in (0, 5):
        study = _stalled_study([best] * 4, [1.0] * 4)
        enqueue_neighbours(study, limit=3, stall=3, score=away, depth=depth)
        picks.append(_queued(study))
    assert picks[0] == picks[1]
    assert len(picks[0]) == 3


def test_local_search_never_enqueues_a_mutation_scored_inf() -> None:
    """A mutation scored ``inf`` (the tuner's score for one over the memory limit) takes no
    trial, even when fewer than ``limit`` mutations are left."""

    names = [f"c{i}" for i in range(6)]
    best = {f"fuse/{n}": False for n in names}
    study = _stalled_study([best, *([{**best, "fuse/c0": True}] * 5)], [1.0] + [2.0] * 5)

    def cost(p: dict) -> float:  # only c1 and c2 fit
        return 1.0 if p["fuse/c1"] or p["fuse/c2"] else math.inf

    assert enqueue_neighbours(study, limit=3, stall=3, score=cost) == 2
    assert sorted(next(k for k, v in p.items() if v) for p in _queued(study)) == [
        "fuse/c1",
        "fuse/c2",
    ]


def test_the_local_search_spends_no_trial_on_a_plan_over_max_mem_usage(graph, tmp_path) -> None:
    """Its mutations are costed before they are enqueued: one over the memory limit is never
    tried (the sampler's own trials may still be). The limit is the leanest plan an
    unconstrained study of the graph meets, so most mutations are over it."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from search_space.rules import Policy

    def trials(cfg: TuneConfig) -> list[optuna.trial.FrozenTrial]:
        tune_graph(graph, cfg, name="bert")
        storage = JournalStorage(JournalFileBackend(cfg.storage))
        (name,) = optuna.get_all_study_names(storage)
        done = optuna.trial.TrialState.COMPLETE
        return [t for t in optuna.load_study(study_name=name, storage=storage).trials
                if t.state == done]  # fmt: skip

    free = trials(_cfg(tmp_path, study="free", trials=30, cost="analytic"))
    limit = min(t.user_attrs["peak_live_bytes"] for t in free)
    tight = _cfg(
        tmp_path, study="tight", trials=30, cost="analytic", storage=str(tmp_path / "t.journal")
    )
    tight = dataclasses.replace(tight, policy=Policy(max_mem_usage=limit))
    local = [t for t in trials(tight)[3:] if "fixed_params" in t.system_attrs]  # not baselines
    assert local, "the local search never ran"
    assert all(t.user_attrs["peak_live_bytes"] <= limit for t in local)
