"""The tuner's fast paths give exactly what the plain paths give.

* the evaluator's scores (groups found by identity, residency from kept L2 touches, kernel
  keys as numbers, plans scored ahead in one model call) equal the plain computation: each
  kernel's latency in its L2 context, remembered by (signature, config, context), summed;
* ``SearchSpace.plan_for`` is ``plan(chosen(params))``;
* a descent told its moves ahead (``prepare``) ends where the plain one ends, at its cost;
* the batched journal storage writes the same parameter records as Optuna's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tuner_helpers import bert_graph

from autotune.tuner import TuneConfig, descend
from autotune.tuner.journal import BatchedJournalStorage, batched_params
from autotune.tuner.session import Session
from search_space import load_graph
from search_space.rules import Policy
from search_space.space import SpacePlan

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _open(folder: Path, graph) -> Session:
    config = TuneConfig(
        trials=1,
        storage=str(folder / "s.journal"),
        policy=Policy(safe_mode=False),
        sets=("l2_bytes=1048576",),  # a small L2: contexts change along a plan
    )
    return Session.open(graph, config, "m")


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Session:
    return _open(tmp_path_factory.mktemp("a"), bert_graph())


def plain_score(s: Session, plan: SpacePlan, prior: bool = False) -> float:
    """The plan's score as the evaluator computed it before its fast paths."""
    ev = s.ev
    model = ev.residency_model if prior else ev.model
    kernels = [ev.lowering.kernel(g, c) for g, c in zip(plan.groups, plan.configs, strict=True)]
    resident = ev.residency_model.residency(kernels)
    return float(np.asarray(model.latencies(kernels, resident), dtype=np.float64).sum())


def _params(s: Session, seed: int, density: float) -> dict:
    draws = np.random.default_rng(seed).random(len(s.space.classes))
    names = s.space.param_of.values()
    return {n: bool(u < density) for n, u in zip(names, draws, strict=True)}


def _tiled(s: Session, plan: SpacePlan, draw: st.DrawFn) -> SpacePlan:
    """The plan's groups, each at a config of its grid drawn by hypothesis (anywhere in it:
    configs far from the best, several configs of one signature in one plan)."""
    grids = [s.oracle.grid(g) for g in plan.groups]
    picks = [draw(st.integers(0, len(g) - 1)) for g in grids]
    return SpacePlan(plan.groups, tuple(g[i] for g, i in zip(grids, picks, strict=True)))


# 12 examples (96 plans): the 13 more that CI's derandomized run drew at 25 held two new
# (seed, density, ahead) triples and 11 repeats of one triple or another, other configs drawn
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    density=st.sampled_from([0.3, 0.7, 1.0]),
    ahead=st.booleans(),
    data=st.data(),
)
def test_scores_are_the_plain_ones(
    bert: Session, seed: int, density: float, ahead: bool, data: st.DataObject
) -> None:
    """Plans at their best configs (as moves are scored) and at configs drawn from their
    grids, scored ahead or one by one, after other examples' plans (the evaluator's memory
    is shared by every example)."""
    s = bert
    params = [_params(s, seed + i, density) for i in range(4)]
    plans = [s.space.plan_for(p) for p in params]
    for p, plan in zip(params, plans, strict=True):
        assert plan == s.space.plan(s.space.chosen(p))
    if ahead:
        s.score_ahead(params)
        s.prior_ahead(params)
    plans += [_tiled(s, plan, data.draw) for plan in plans]
    if ahead:
        s.ev.prefetch(plans[4:])
        s.ev.prefetch(plans[4:], prior=True)
    for plan in plans:
        assert s.ev.score(plan) == plain_score(s, plan)
        assert s.ev.prior_score(plan) == plain_score(s, plan, prior=True)
        assert float(np.array(s.ev.kernel_latencies(plan)).sum()) == s.ev.score(plan)


@pytest.fixture(scope="module")
def forbidding(tmp_path_factory: pytest.TempPathFactory) -> Session:
    """A session of its own: the test forbids signatures in it as it goes."""
    return _open(tmp_path_factory.mktemp("f"), bert_graph())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    density=st.sampled_from([0.3, 0.7, 1.0]),
    forbid=st.booleans(),
    data=st.data(),
)
def test_plan_for_is_the_plain_repair_as_signatures_are_forbidden(
    forbidding: Session, seed: int, density: float, forbid: bool, data: st.DataObject
) -> None:
    """A move's groups, remembered by the classes it switches on, are the uncached repair
    of its edges, also once a signature of one of its groups is forbidden after it was
    remembered (the memory is keyed by the forbidden signatures too)."""
    space = forbidding.space
    params = _params(forbidding, seed, density)
    before = space.plan_for(params)
    fused = [g for g in before.groups if len(g.ops) > 1]
    if forbid and fused:
        g = data.draw(st.sampled_from(fused))
        space.forbid({g.signature(forbidding.ctx.graph): "drawn by the test"})
    plan = space.plan_for(params)
    assert plan.groups == space._repair(space.chosen(params))
    assert plan == space.plan(space.chosen(params))


@pytest.mark.parametrize("prior", [False, True])
def test_a_descent_told_its_moves_ahead_ends_where_the_plain_one_does(
    tmp_path: Path, prior: bool
) -> None:
    """Two studies of one model, one descending with ``prepare`` and one without (nothing
    shared between them but the model): the same end at the same cost. On inception_v1, as on
    inception_v2 (3x its ops, 2.5x the time), both steps of each descent reach the swap tier
    and take a swap, so ``prepare`` is told four tiers of moves, over the same kernel kinds."""
    graph = load_graph(LIGHT / "light_inception_v1.onnx")
    ends = []
    for i, ahead in enumerate((False, True)):
        (tmp_path / str(i)).mkdir()
        s = _open(tmp_path / str(i), graph)
        parts = [
            frozenset(n for n in g.ops if n in s.ctx.index) for g in s.baselines["max"].groups
        ]
        cost, prepare = (s.prior_cost, s.prior_ahead) if prior else (s.mutant_cost, s.score_ahead)
        end, value = descend(
            s.space.params_for(parts), cost, s.blocks, 2, 0, swaps=s.swaps,
            prepare=prepare if ahead else None,
        )  # fmt: skip
        ends.append((json.dumps(end, sort_keys=True), value))
    assert ends[0] == ends[1]


def _study(storage: optuna.storages.BaseStorage, batched: bool) -> list[tuple]:
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=3))

    def objective(trial: optuna.trial.Trial) -> float:
        if batched:
            with batched_params(trial.storage):
                xs = [trial.suggest_categorical(f"fuse/c{i}", [False, True]) for i in range(30)]
        else:
            xs = [trial.suggest_categorical(f"fuse/c{i}", [False, True]) for i in range(30)]
        trial.set_user_attr("n", sum(xs))
        return float(sum(x * (i % 7) for i, x in enumerate(xs)))

    study.enqueue_trial({"fuse/c0": True})
    study.optimize(objective, n_trials=8)
    return [(t.number, t.params, t.value, t.user_attrs) for t in study.trials]


def _records(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        r.pop("worker_id", None)
        for k in ("datetime_start", "datetime_complete"):
            r.pop(k, None)
    return rows


def test_batched_parameters_are_the_records_optuna_writes(tmp_path: Path) -> None:
    from optuna.storages.journal import JournalFileBackend

    plain = optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "a.journal")))
    fast = BatchedJournalStorage(JournalFileBackend(str(tmp_path / "b.journal")))
    trials = _study(plain, batched=False)
    assert _study(fast, batched=True) == trials
    a, b = _records(tmp_path / "a.journal"), _records(tmp_path / "b.journal")
    assert [r for r in a if "study_name" not in r] == [r for r in b if "study_name" not in r]
    again = optuna.load_study(  # what another worker (or a resume) reads back
        study_name=optuna.get_all_study_names(fast)[0],
        storage=BatchedJournalStorage(JournalFileBackend(str(tmp_path / "b.journal"))),
    )
    assert [(t.number, t.params, t.value, t.user_attrs) for t in again.trials] == trials


@settings(max_examples=200, deadline=None)
@given(
    moves=st.lists(st.dictionaries(st.sampled_from("abc"), st.booleans(), min_size=3), max_size=8),
    seen=st.lists(st.dictionaries(st.sampled_from("abc"), st.booleans(), min_size=3), max_size=4),
)
def test_unseen_moves_are_the_plain_filter(moves: list[dict], seen: list[dict]) -> None:
    """Keys made once per move: the same moves kept (a move listed twice stays twice)."""
    from autotune.tuner.search import _key, _unseen

    plain_seen = {tuple(sorted(p.items())) for p in seen}
    want = [p for p in moves if tuple(sorted(p.items())) not in plain_seen]
    fast_seen = {_key(p) for p in seen}
    assert _unseen(moves, fast_seen) == want
    assert fast_seen == {_key(p) for p in [*seen, *moves]}
