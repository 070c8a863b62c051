"""On every small zoo model: tune (safe mode on) -> apply -> the fused model matches the
original in onnxruntime, and every fused kernel passes verification."""

from __future__ import annotations

import pytest

from autotune.apply import apply_plan
from autotune.tuner import TuneConfig, tune_graph
from autotune.verify import graph_equivalence, verify_kernels
from costmodel.spec import load_target
from search_space import load_graph
from search_space.rules import Policy
from search_space.zoo import build, list_models

SMALL = {"llama3-8b": {"scale": 0.05, "layers": 2}}


@pytest.mark.parametrize("name", [m.name for m in list_models()])
def test_tune_apply_verify(name: str, tmp_path) -> None:
    kw = SMALL.get(name, {"scale": 0.1})
    model = build(name, weights="random", **kw)
    graph = load_graph(model)
    cfg = TuneConfig(trials=4, measure_every=100, storage=str(tmp_path / "s.journal"))
    result = tune_graph(graph, cfg, name=name)
    plan = result.plan
    assert any(len(g.ops) > 1 for g in plan.groups)
    fused = apply_plan(model, graph, plan.groups)
    equiv = graph_equivalence(model, fused, graph, seed=1)
    assert equiv["ok"], equiv
    verdicts = verify_kernels(model, graph, plan.groups, load_target(), Policy(), seed=1)
    assert all(v.ok for v in verdicts), [v.verdict for v in verdicts if not v.ok]
