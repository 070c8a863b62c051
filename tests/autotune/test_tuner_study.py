"""Whole studies: baselines, resuming, failures, samplers, Pareto, Ctrl-C, CLI, storage."""

from __future__ import annotations

import json

import optuna
import pytest
from tuner_helpers import _cfg, bert_graph

from autotune.exceptions import AutotuneError
from autotune.tuner import tune_graph


@pytest.fixture(scope="module")
def graph():
    return bert_graph()


@pytest.fixture(scope="module")
def default_study(graph, tmp_path_factory: pytest.TempPathFactory):
    """A study with the default settings, whose answer two tests check."""
    return tune_graph(graph, _cfg(tmp_path_factory.mktemp("default")), name="bert")


def test_tuned_plan_is_never_worse_than_greedy_and_reports_baselines(
    graph, default_study, tmp_path
) -> None:
    result = default_study
    data = result.to_json()
    for key in (
        "latency",
        "simulated_us",
        "baseline_simulated_us",
        "speedup_vs_none_simulated",
        "speedup_vs_greedy_simulated",
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
    from autotune.tuner import evaluator

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
    lat = [p["predicted_us"] for p in result.pareto]
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
    assert r["latency"] == data["latency"]  # one vocabulary: the plan's one number
    assert r["schema"]["version"] == data["schema"]["version"] == 2
    bad = runner.invoke(app, ["tune", "zoo:gpt2", "--scale", "0.1", "-o", "nodir/p.json"])
    assert bad.exit_code == 1 and "does not exist" in bad.stderr


def test_max_mem_usage_limits_the_chosen_plan(graph, default_study, tmp_path) -> None:
    from search_space.rules import Policy
    from search_space.space import peak_live_bytes

    free = default_study  # no limit
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


def test_a_plan_with_no_work_has_no_speedup_rather_than_a_division_by_zero() -> None:
    from autotune.tuner import TuneResult
    from search_space.space import FusionPlan

    result = TuneResult(
        plan=FusionPlan("0" * 16, "ascend910b", ()), study="s", storage="j", trials=1,
        best_latency_us=0.0, baseline_us={"none": 0.0, "greedy": None}, predicted_us=0.0,
    )  # fmt: skip
    assert result.speedup("none") is None and result.speedup("greedy") is None
    assert json.loads(json.dumps(result.to_json()))["speedup_vs_none_simulated"] is None
