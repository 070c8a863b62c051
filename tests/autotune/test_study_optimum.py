"""The exact optimum a study records at its set-up (``baselines_predicted_us``) is bounded in
work, not in seconds: on a machine where its every step takes a tenth of a second the study
records the same figure as on an idle one."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

import search_space.space.optimal as optimal
from autotune.tuner import TuneConfig
from autotune.tuner.annotate import describe_study
from autotune.tuner.session import Session
from search_space import load_graph
from search_space.rules import Policy
from search_space.zoo import build


def _recorded_optimum(folder: Path) -> float | None:
    folder.mkdir()
    graph = load_graph(build("bert-base", weights="inputs", scale=0.1))
    config = TuneConfig(
        trials=1,
        cost="analytic",
        storage=str(folder / "s.journal"),
        policy=Policy(safe_mode=False),
    )
    s = Session.open(graph, config, "bert")
    describe_study(s)
    return s.study.user_attrs["baselines_predicted_us"]["optimal"]


def test_a_slow_machine_records_the_same_optimum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle = _recorded_optimum(tmp_path / "idle")
    ticks = itertools.count()
    clock = SimpleNamespace(monotonic=lambda: next(ticks) * 0.1)  # 0.1 s per clock read
    monkeypatch.setattr(optimal, "time", clock)
    busy = _recorded_optimum(tmp_path / "busy")
    assert idle is not None and busy == idle
