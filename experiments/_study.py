"""Shared by the benchmark scripts: a fresh safe-mode study of a model, as `autotune tune`
runs it, and a session on its storage to measure other plans the same way."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from autotune.tuner import TuneConfig, TuneResult, make_safety, tune_graph
from autotune.tuner.session import Session
from costmodel.spec import Target, load_target
from search_space import Graph
from search_space.zoo import ZooOptions


@dataclass(frozen=True)
class Study:
    """A finished study: its result, a session on its storage (safe mode on, so what it
    measures is checked as the study's plans were), its target and its wall time."""

    result: TuneResult
    session: Session
    target: Target
    wall_s: float


@contextmanager
def fresh_study(
    graph: Graph, spec: str, zoo: ZooOptions, name: str, trials: int
) -> Iterator[Study]:
    """A study of ``trials`` trials in a temporary folder (removed after the block)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = TuneConfig(
            trials=trials, storage=str(Path(tmp) / "s.journal"), dataset=str(Path(tmp) / "r.pq")
        )
        target = load_target(config.target, config.sets, config.precision)
        safety = make_safety(graph, spec, zoo, config.policy, target)
        t0 = time.perf_counter()
        result = tune_graph(graph, config, name=name, safety=safety)
        wall = time.perf_counter() - t0
        yield Study(result, Session.open(graph, config, name, safety), target, wall)
