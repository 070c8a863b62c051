"""apply_plan on whole models: max and greedy plans on the zoo and real exports, random plans."""

from __future__ import annotations

import onnx
import pytest
from apply_helpers import _assert_same, _check_apply, _feeds, _max_plan, _oracle, _zoo
from conftest import EXPORT_FILES, EXPORTS, export_shapes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search_space import load_graph
from search_space.space import PlanGroup, baseline_plan
from search_space.zoo import build, list_models

ZOO = [info.name for info in list_models()]


# -- zoo models and real exports -------------------------------------------------------------
@pytest.mark.parametrize("name", ZOO)
def test_zoo_max_plan(name: str) -> None:
    model = _zoo(name)
    graph = load_graph(model)
    groups = _max_plan(graph)
    assert sum(len(g.ops) > 1 for g in groups) >= 3
    _check_apply(model, graph, groups, _feeds(model))


@pytest.mark.parametrize("name", ["bert-base", "resnet50", "llama3-8b"])
def test_zoo_greedy_plan(name: str) -> None:
    model = _zoo(name)
    graph = load_graph(model)
    ctx, oracle = _oracle(graph)
    plan = baseline_plan("greedy", ctx, oracle)
    groups = [PlanGroup(g.ops, g.kind, c) for g, c in zip(plan.groups, plan.configs, strict=True)]
    _check_apply(model, graph, groups, _feeds(model))


@pytest.mark.parametrize("name", EXPORT_FILES)
def test_export_max_plan(name: str) -> None:
    path = EXPORTS / name
    legacy_encoder = name == "encoder_layer_legacy_op14.onnx"  # the exporter baked seq = 8 in
    shapes = export_shapes(name, 2, 8 if legacy_encoder else 16)
    graph = load_graph(path, input_shapes=shapes)
    model = onnx.load(str(path))
    groups = _max_plan(graph)
    fused = _check_apply(model, graph, groups, _feeds(model, shapes))
    # nothing was baked in: the fused model keeps the dynamic dims and runs at other sizes
    dims = [[d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input]
    assert [[d.dim_param for d in i.type.tensor_type.shape.dim] for i in fused.graph.input] == dims
    other = export_shapes(name, 3, 8 if legacy_encoder else 5)
    _assert_same(model, fused, _feeds(model, other, seed=1))


# -- property: any repaired plan applies -----------------------------------------------------
_PROP_MODEL = build("bert-base", weights="random", scale=0.1, layers=1)
_PROP_GRAPH = load_graph(_PROP_MODEL)
_PROP_CTX, _PROP_ORACLE = _oracle(_PROP_GRAPH)
_PROP_FEEDS = _feeds(_PROP_MODEL)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.booleans(), min_size=len(_PROP_CTX.edges), max_size=len(_PROP_CTX.edges)))
def test_random_repaired_plans_apply(chosen: list[bool]) -> None:
    edges = [e for e, keep in zip(_PROP_CTX.edges, chosen, strict=True) if keep]
    parts = _PROP_CTX.repair(edges, _PROP_ORACLE.feasible)
    groups = [PlanGroup(g.ops, g.kind) for g in _PROP_CTX.to_groups(parts)]
    _check_apply(_PROP_MODEL, _PROP_GRAPH, groups, _PROP_FEEDS)
