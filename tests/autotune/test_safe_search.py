"""Safety inside the search (docs/tuning.md, docs/verification.md): a kernel signature that
fails verification when a plan is measured becomes a constraint of the study. Groups of that
signature are forbidden, the trials after are repaired around them, and groups of other
signatures keep their fusions. The study's storage keeps the constraint for a resumed run.

The fault is planted in the kernel template: every fused group with a LayerNormalization keeps
its statistics in fp16 (the ``stats_fp16`` knob, on every config of such a group). On BERT's
residual LayerNorms that overflows at the outlier scale; the real verifier catches it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.tuner import TuneConfig, make_safety, tune_graph
from autotune.tuner.session import FORBIDDEN, Session
from autotune.verify import verify_kernels
from autotune.verify.check import Status
from costmodel.lower import Lowering
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import Graph, make_group
from search_space.rules import Policy
from search_space.space import PlanGroup, SpacePlan
from search_space.zoo import ZooOptions, build

ZOO = ZooOptions(weights="inputs", scale=0.1, layers=1)
KNOB = (("stats_fp16", 1),)


def _has_norm(graph: Graph, ops: Any) -> bool:
    return len(ops) > 1 and any(graph.op(o).op_type == "LayerNormalization" for o in ops)


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel template whose fused norms only come with fp16 statistics."""
    grid, default = Lowering.grid, Lowering.default

    def planted_grid(self: Lowering, group: Any) -> list[Any]:
        configs = grid(self, group)
        if not _has_norm(self.graph, group.ops):
            return configs
        return [dataclasses.replace(c, knobs=KNOB) for c in configs]

    def planted_default(self: Lowering, group: Any) -> Any:
        c = default(self, group)
        return dataclasses.replace(c, knobs=KNOB) if _has_norm(self.graph, group.ops) else c

    monkeypatch.setattr(Lowering, "grid", planted_grid)
    monkeypatch.setattr(Lowering, "default", planted_default)


def test_a_failing_signature_is_forbidden_and_the_trials_after_are_repaired(
    tmp_path: Path, planted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = load_graph(build("bert-base", weights="inputs", scale=0.1, layers=1))
    config = TuneConfig(
        trials=30,
        measure_every=5,
        cost="analytic",
        storage=str(tmp_path / "s.journal"),
        dataset=str(tmp_path / "rows.parquet"),
    )
    target = load_target()
    forbids: list[tuple[int, set[str]]] = []  # (trials in the study, signatures) per call
    forbid = Session.forbid

    def spy(self: Session, failed: Any) -> None:
        new = set(failed) - set(self.space.forbidden)
        if new:
            forbids.append((len(self.study.trials), new))
        forbid(self, failed)

    monkeypatch.setattr(Session, "forbid", spy)
    check = make_safety(graph, "zoo:bert-base", ZOO, Policy(), target)
    result = tune_graph(graph, config, name="bert-base", safety=check)

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "s.journal"))
    )
    study = optuna.load_study(study_name=result.study, storage=storage)
    stored = study.user_attrs[FORBIDDEN]
    assert stored and result.report["forbidden"] == len(stored)
    timing = result.plan.meta["timing_s"]  # where the wall time went, safe mode apart
    assert {"setup", "trials", "measurement", "safe mode", "pick", "report"} <= set(timing)
    assert timing["safe mode"] > 0 and timing["measurement"] > 0
    assert set().union(*(sigs for _, sigs in forbids)) == set(stored)

    # each forbidden signature fails an independent check of the group stored with it, and
    # passes without the planted fault: the constraint is the fault, not fusion at large
    model = build("bert-base", weights="inputs", scale=0.1, layers=1)
    low = Lowering(graph, target)
    for sig, entry in stored.items():
        group = make_group(graph, entry["ops"])
        assert group.signature(graph) == sig and _has_norm(graph, group.ops)
        bad = PlanGroup(group.ops, group.kind, low.default(group))
        [v] = verify_kernels(model, graph, [bad], target, Policy(), input_scale=1.0)
        assert v.status is Status.FAILED, v.verdict
        good = PlanGroup(group.ops, group.kind, dataclasses.replace(bad.config, knobs=()))
        [ok] = verify_kernels(model, graph, [good], target, Policy())
        assert ok.status is Status.PASSED, ok.verdict

    # the winner holds no forbidden kernel, keeps fusions of other signatures, and a fresh
    # check of it unfuses nothing
    fused = [g for g in result.plan.groups if len(g.ops) > 1]
    assert not {make_group(graph, g.ops, g.kind).signature(graph) for g in fused} & set(stored)
    assert any(not _has_norm(graph, g.ops) for g in fused)
    groups = tuple(make_group(graph, g.ops, g.kind) for g in result.plan.groups)
    winner = SpacePlan(groups, tuple(g.config for g in result.plan.groups))
    again = make_safety(graph, "zoo:bert-base", ZOO, Policy(), target)(winner)
    assert again.plan == winner and not again.failed
    s = Session.open(graph, config, "bert-base")
    assert set(s.space.forbidden) == set(stored)  # a resumed study starts from them

    # every trial was scored on its plan repaired around the signatures forbidden before it
    # ran, and the repair did work: some would have fused a forbidden group without it
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    changed = 0
    for t in done:
        known = set().union(set(), *(sigs for n, sigs in forbids if n <= t.number))
        s.space.forbidden = {k: v for k, v in stored.items() if k in known}
        assert s.replay(t).key() == t.user_attrs["plan_key"], t.number
        if known:
            s.space.forbidden = {}
            changed += s.replay(t).key() != t.user_attrs["plan_key"]
    assert changed > 0
