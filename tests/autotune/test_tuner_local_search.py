"""The local search and the steepest descent that mutate a stalled study's incumbent."""

from __future__ import annotations

import dataclasses
import math

import optuna
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tuner_helpers import _cfg, bert_graph

from autotune.tuner import TuneConfig, descend, enqueue_neighbours, tune_graph


@pytest.fixture(scope="module")
def graph():
    return bert_graph()


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
    blocks = [("fuse/c0",), ("fuse/c0", "fuse/c1", "fuse/c2"), ("fuse/c3", "fuse/c4")]  # 1st on
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
    blocks = [("fuse/c1", "fuse/c2"), ("fuse/c3", "fuse/c4")]
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
    end, value = descend(start, cost, depth=4, swaps=[(a, b)])
    assert end == {**start, a: False, b: True} and value == 1.0


@pytest.mark.parametrize("flip_helps", [True, False])
def test_swaps_are_scored_only_at_a_local_optimum_of_flips(flip_helps: bool) -> None:
    """The study's local search tries swaps as a second tier: while a block move or flip
    lowers the incumbent's score, no swap is scored (each is a new group for a learned model
    to tile); at a local optimum of flips, the swap that escapes it is enqueued first."""
    names = [f"fuse/c{i}" for i in range(6)]
    best = {k: False for k in names} | {"fuse/c0": True}
    study = _stalled_study([best, *([{**best, "fuse/c5": True}] * 4)], [2.0] + [3.0] * 4)
    swapped = {**best, "fuse/c0": False, "fuse/c1": True}
    scored: list[dict] = []

    def cost(p: dict) -> float:
        scored.append(p)
        if p == swapped:
            return 1.0
        if flip_helps and p == {**best, "fuse/c3": True}:
            return 1.5
        return 2.0 + sum(1.0 for k in names if p[k] != best[k])  # every other move is dearer

    enqueue_neighbours(study, limit=2, stall=3, score=cost, swaps=[("fuse/c0", "fuse/c1")])
    queued = _queued(study)
    if flip_helps:
        assert swapped not in scored and queued[0] == {**best, "fuse/c3": True}
    else:
        assert scored.count(swapped) == 1 and queued[0] == swapped


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
        (name,) = [n for n in optuna.get_all_study_names(storage) if not n.endswith(":measured")]
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
