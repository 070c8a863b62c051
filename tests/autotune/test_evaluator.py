"""The study's plan scores (autotune.tuner.evaluator): remembered kernel by kernel, yet always
the whole plan's prediction by the model, before and after a refit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.tuner import TuneConfig
from autotune.tuner.session import Session
from search_space import load_graph
from search_space.rules import Policy
from search_space.space import SpacePlan
from search_space.zoo import build


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    graph = load_graph(build("bert-base", weights="inputs", layers=1, scale=0.25))
    folder = tmp_path_factory.mktemp("study")
    config = TuneConfig(
        trials=1,
        cost="learned",
        storage=str(folder / "s.journal"),
        policy=Policy(safe_mode=False),
        retrain_every=1,
        sets=("l2_bytes=1048576",),  # a small L2: a kernel's context depends on the plan
    )
    return Session.open(graph, config, "bert")


@st.composite
def plans(draw: st.DrawFn, s: Session) -> SpacePlan:
    """A plan of random fusion decisions, each group at a random config of its grid."""
    params = {s.space.param_of[n]: draw(st.booleans()) for n in sorted(s.space.classes)}
    groups = s.space.plan(s.space.chosen(params)).groups
    configs = []
    for g in groups:
        grid = s.oracle.grid(g)
        configs.append(grid[draw(st.integers(0, min(len(grid), 8) - 1))])
    return SpacePlan(groups, tuple(configs))


def _whole(model, s: Session, plan: SpacePlan) -> float:
    return float(model.predict(s.ev.kernels(plan)).sum())


@settings(max_examples=30, deadline=None, derandomize=True)
@given(data=st.data())
def test_score_is_the_models_prediction_of_the_whole_plan(session: Session, data) -> None:
    """Kernels scored for earlier plans (the memory is shared by every example) are reused
    only where the kernel, its config and its L2 context are the same."""
    s = session
    plan = data.draw(plans(s))
    assert s.ev.score(plan) == pytest.approx(_whole(s.ev.model, s, plan), rel=1e-12)
    prior = _whole(s.ev.residency_model, s, plan)
    assert s.ev.prior_score(plan) == pytest.approx(prior, rel=1e-12)


def test_a_refit_is_not_scored_from_the_older_model(session: Session) -> None:
    s = session
    probe = s.space.plan(s.space.chosen(dict.fromkeys(s.space.param_of.values(), True)))
    before = s.ev.score(probe)
    version = s.ev.model.version
    for fused in (False, True):
        s.ev.measure(s.space.plan(s.space.chosen(dict.fromkeys(s.space.param_of.values(), fused))))
    assert s.ev.retrain(force=True)
    assert s.ev.model.version != version
    after = s.ev.score(probe)
    assert after == pytest.approx(_whole(s.ev.model, s, probe), rel=1e-12)
    assert after != before  # the refitted correction moved it
