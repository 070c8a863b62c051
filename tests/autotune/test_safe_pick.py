"""Safe mode before the candidates compete (docs/verification.md, docs/tuning.md).

A plan whose fused kernel fails verification does not win by the speed of that kernel: each
candidate, fastest first, is made safe (its failing kernels unfused) and measured again, and the
fastest safe plan wins; the greedy baseline it is compared with passes the same check. Each
kernel is verified once per (signature, config) however many plans share it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import autotune.verify.check as check_module
from autotune.tuner import TuneConfig, make_safety, steps, tune_graph
from autotune.tuner.session import Session
from costmodel.spec import load_target
from search_space import load_graph
from search_space.rules import Policy
from search_space.space import SpacePlan
from search_space.zoo import ZooOptions, build

ZOO = ZooOptions(weights="inputs", scale=0.1, layers=1)


def _planted(plan: SpacePlan, graph) -> SpacePlan:
    """``plan`` with its first residual LayerNorm kernel computing statistics in fp16."""
    ln = next(
        i
        for i, g in enumerate(plan.groups)
        if len(g.ops) > 1
        and any(
            graph.op(o).op_type == "LayerNormalization" and "attention/output" in o for o in g.ops
        )
    )
    configs = list(plan.configs)
    configs[ln] = dataclasses.replace(configs[ln], knobs=(("stats_fp16", 1),))
    return SpacePlan(plan.groups, tuple(configs))


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    tmp = tmp_path_factory.mktemp("safe")
    graph = load_graph(build("bert-base", weights="inputs", scale=0.1, layers=1))
    config = TuneConfig(
        cost="analytic", storage=str(tmp / "s.journal"), dataset=str(tmp / "rows.parquet")
    )
    return Session.open(graph, config, "bert-base")


def test_a_kernel_is_verified_once_however_many_plans_share_it(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = make_safety(session.graph, "zoo:bert-base", ZOO, Policy(), session.target)
    plan = session.baselines["max"]
    runs: list[tuple[str, float]] = []  # (kernel, input scale): passing kernels run twice
    real = check_module.verify_group

    def counted(*args, **kw):
        runs.append((args[1].signature(session.graph), kw.get("input_scale", 1.0)))
        return real(*args, **kw)

    monkeypatch.setattr(check_module, "verify_group", counted)
    first = check(plan)
    assert runs and len(runs) == len(set(runs))  # each distinct kernel once
    done = len(runs)
    assert check(plan) == first and len(runs) == done  # the second plan costs no check
    halved = [dataclasses.replace(c, block_dim=max(1, c.block_dim // 2)) for c in plan.configs]
    retiled = SpacePlan(plan.groups, tuple(halved))
    assert retiled != plan and check(retiled).counts == first.counts
    assert len(runs) == done  # core counts do not change what a kernel computes: no new check
    planted = _planted(plan, session.graph)
    checked = check(planted)
    safe, counts = checked.plan, checked.counts
    assert {k for k, _ in runs[done:]} == {runs[done][0]}  # only the re-tiled kernel
    assert counts["skipped_precision"] == 1 and safe != planted


def test_the_fastest_safe_plan_wins_and_greedy_is_checked_alike(session: Session) -> None:
    check = make_safety(session.graph, "zoo:bert-base", ZOO, Policy(), session.target)
    clean = session.baselines["max"]
    planted = _planted(clean, session.graph)
    bad = session.measure(planted, "planted")
    good = session.measure(clean, "clean")
    others = [session.measure(session.baselines[k], k) for k in ("none", "greedy")]
    # the planted plan is the picked one: safe mode must not let it win as measured
    winner, _, _, greedy = steps.safe_pick(session, bad, [bad, good, *others], check)
    made_safe = session.measure(check(planted).plan, "planted, safe")
    assert made_safe.plan != planted
    assert winner.plan != planted
    assert winner.latency_us <= min(made_safe.latency_us, good.latency_us) + 1e-9
    safe_greedy = check(session.baselines["greedy"]).plan
    assert greedy.plan == safe_greedy
    assert greedy.source == (
        "greedy" if safe_greedy == session.baselines["greedy"] else "greedy, safe"
    )
    # no kernel of the winner fails its check
    again = check(winner.plan).counts
    assert again["skipped_precision"] == 0


def test_the_plan_record_names_what_the_plan_is_compared_with(tmp_path: Path) -> None:
    graph = load_graph(build("bert-base", weights="inputs", scale=0.1, layers=1))
    config = TuneConfig(
        trials=6,
        measure_every=3,
        cost="analytic",
        storage=str(tmp_path / "s.journal"),
        dataset=str(tmp_path / "rows.parquet"),
    )
    check = make_safety(graph, "zoo:bert-base", ZOO, Policy(), load_target())
    result = tune_graph(graph, config, name="bert-base", safety=check)
    meta = result.plan.meta
    # the greedy the plan is compared with is greedy as safe mode leaves it, measured anew
    s = Session.open(graph, config, "bert-base")
    greedy = s.baselines["greedy"]
    safe_greedy = check(greedy).plan
    assert meta["compared_with"] == {
        "none": "none",
        "greedy": "greedy" if safe_greedy == greedy else "greedy, safe",
    }
    assert meta["baseline_simulated_us"]["greedy"] == pytest.approx(
        s.measure(safe_greedy, "g").latency_us
    )
