"""The study's result is a function of its storage: every measured candidate is written to
the measured study with its plan, and a run picks from all a storage holds, so a later
``--trials 0`` run (or the last of several workers) writes the same plan."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tuner_helpers import _cfg
from typer.testing import CliRunner

from autotune.cli import app
from autotune.exceptions import AutotuneError
from autotune.tuner import TuneConfig, tune_graph
from autotune.tuner.ledger import PLAN, measured_study, plan_from_attr, plan_to_attr, publish
from autotune.tuner.ledger import stored as stored_candidates
from autotune.tuner.records import Candidate, MeasureResult
from autotune.tuner.session import Session
from search_space.space import SpacePlan

runner = CliRunner()
MODEL = ["zoo:bert-base", "--scale", "0.1", "--layers", "1", "--cost", "analytic"]


def _groups(plan_file: Path) -> list[tuple[list[str], dict]]:
    data = json.loads(plan_file.read_text())
    return [(g["ops"], g.get("config")) for g in data["groups"]]


def _tune(tmp_path: Path, *args: str) -> None:
    storage = ["--storage", str(tmp_path / "s.journal"), "--study", "st"]
    res = runner.invoke(app, ["tune", *MODEL, *storage, *args])
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    from search_space import load_graph
    from search_space.zoo import build

    graph = load_graph(build("bert-base", weights="inputs", layers=1, scale=0.1))
    tmp = tmp_path_factory.mktemp("ledger")
    return Session.open(graph, _cfg(tmp, cost="analytic", trials=4), "bert")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_stored_plan_reads_back_as_itself(session: Session, data: st.DataObject) -> None:
    """Any plan of the space (fusion decisions and tiles drawn at random) goes to the storage
    (as JSON) and back unchanged: same groups, same configs, same key."""
    fuse = {p: data.draw(st.booleans(), label=p) for p in session.space.param_of.values()}
    groups = session.space.plan(session.space.chosen(fuse)).groups
    configs = []
    for g in groups:
        grid = session.oracle.grid(g)
        configs.append(grid[data.draw(st.integers(0, len(grid) - 1), label="config")])
    plan = SpacePlan(groups, tuple(configs))
    back = plan_from_attr(session, json.loads(json.dumps(plan_to_attr(plan))))
    assert back == plan
    assert back is not None and back.key() == plan.key()


def test_a_plan_that_does_not_fit_is_never_trusted(session: Session) -> None:
    plan = session.baselines["greedy"]
    data = plan_to_attr(plan)
    renamed = [[[*ops[:-1], "no_such_op"], kind, cfg] for ops, kind, cfg in data]
    assert plan_from_attr(session, renamed) is None
    bad_tile = [[ops, kind, {**cfg, "block_dim": -1}] for ops, kind, cfg in data]
    assert plan_from_attr(session, bad_tile) is None
    assert plan_from_attr(session, "not a plan") is None
    assert plan_from_attr(session, [[1, 2]]) is None


def test_a_later_run_picks_from_what_the_storage_holds(tmp_path: Path) -> None:
    """A plan another worker measured (planted here with a latency below anything real) is
    what the next run on the storage picks, though this run never measured it; one measured
    on another spec is left out."""
    from search_space import load_graph
    from search_space.zoo import build

    graph = load_graph(build("bert-base", weights="inputs", layers=1, scale=0.1))
    cfg = _cfg(tmp_path, cost="analytic", trials=4, study="st", polish=0)
    first = tune_graph(graph, cfg, name="bert")
    s = Session.open(graph, dataclasses_replace(cfg, trials=0), "bert")
    groups = s.baselines["max"].groups  # max's groups at tiles no run would choose
    planted = SpacePlan(groups, tuple(s.oracle.grid(g)[-1] for g in groups))
    assert planted.key() != _key_of(first.plan)
    publish(s, [Candidate(planted, MeasureResult(0.5), "another worker")])
    other = s.baselines["none"]
    study = measured_study(s)
    study.add_trial(
        optuna.trial.create_trial(
            values=[0.1],
            user_attrs={"plan_key": other.key(), "measured_on": "another spec", "source": "x"},
            system_attrs={PLAN: plan_to_attr(other)},
        )
    )
    got = stored_candidates(s, [])
    assert planted.key() in {c.plan.key() for c in got}
    assert other.key() not in {c.plan.key() for c in got}
    again = tune_graph(graph, dataclasses_replace(cfg, trials=0), name="bert")
    assert _key_of(again.plan) == planted.key()
    assert again.best_latency_us == pytest.approx(0.5)
    assert again.plan.meta["source"] == "another worker"


def _key_of(record) -> str:  # type: ignore[no-untyped-def]
    from search_space import load_graph
    from search_space.ir import KernelConfig, make_group
    from search_space.zoo import build

    graph = load_graph(build("bert-base", weights="inputs", layers=1, scale=0.1))
    groups = tuple(make_group(graph, g.ops, g.kind) for g in record.groups)
    configs = tuple(KernelConfig.from_json(g.config.to_json()) for g in record.groups)
    return SpacePlan(groups, configs).key()


def dataclasses_replace(cfg: TuneConfig, **kw: object) -> TuneConfig:
    import dataclasses

    return dataclasses.replace(cfg, **kw)


def test_trials_0_writes_the_plan_the_study_wrote(tmp_path: Path) -> None:
    """Two workers one after the other (other seeds), then ``--trials 0``: the last worker
    and the pick-only run write the same groups and configs, and the pick-only run
    simulates no new candidate."""
    _tune(tmp_path, "--trials", "4", "--seed", "1", "-o", str(tmp_path / "a.json"))
    _tune(tmp_path, "--trials", "4", "--seed", "2", "-o", str(tmp_path / "b.json"))
    _tune(tmp_path, "--trials", "0", "-o", str(tmp_path / "c.json"))
    assert _groups(tmp_path / "b.json") == _groups(tmp_path / "c.json")
    a, b, c = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "abc")
    assert b["simulated_us"] <= a["simulated_us"] + 1e-9  # the second saw the first's plans
    assert c["simulated_us"] == pytest.approx(b["simulated_us"])
    assert "polish" not in c["meta"]["timing_s"] and "trials" not in c["meta"]["timing_s"]


def test_trials_0_needs_a_study(tmp_path: Path) -> None:
    journal = tmp_path / "s.journal"
    res = runner.invoke(app, ["tune", *MODEL, "--trials", "0", "--storage", str(journal)])
    assert res.exit_code == 1 and "--trials 0 picks the plan" in res.output
    assert not journal.exists()  # no empty storage left behind
    _tune(tmp_path, "--trials", "2", "-o", str(tmp_path / "a.json"))
    res = runner.invoke(
        app, ["tune", *MODEL, "--trials", "0", "--storage", str(journal), "--study", "other"]
    )
    assert res.exit_code == 1 and "has no such study" in res.output
    with pytest.raises(AutotuneError, match="--trials must be >= 0"):
        TuneConfig(trials=-1).check()
