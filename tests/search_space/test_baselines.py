"""Baselines on every zoo model, under the additive analytic cost:
optimal <= max, optimal <= greedy <= none; greedy applies exactly its preset's rules."""

from __future__ import annotations

import pytest

from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import Policy, greedy, rule_registry
from search_space.space import baseline_plan, plan_cost
from search_space.zoo import build, list_models

SMALL = {"llama3-8b": {"scale": 0.05, "layers": 2}}


@pytest.mark.parametrize("name", [m.name for m in list_models()])
def test_optimal_beats_max_and_greedy_beats_none(name: str) -> None:
    graph = load_graph(build(name, weights="inputs", **SMALL.get(name, {"scale": 0.1})))
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target(), ctx=ctx)
    cost = {
        k: plan_cost(baseline_plan(k, ctx, oracle), oracle)
        for k in ("none", "greedy", "max", "optimal")
    }
    tol = 1e-6 * cost["none"]
    assert cost["optimal"] <= cost["max"] + tol, cost
    assert cost["optimal"] <= cost["greedy"] + tol, cost
    assert cost["greedy"] <= cost["none"] + tol, cost


@pytest.mark.parametrize(
    ("name", "preset"),
    [("resnet50", "cnn"), ("bert-base", "transformer"), ("llama3-8b", "transformer")],
)
def test_greedy_applies_exactly_the_presets_rules(name: str, preset: str) -> None:
    graph = load_graph(build(name, weights="inputs", **SMALL.get(name, {"scale": 0.1})))
    ctx = FusionContext(graph)
    rules = rule_registry(Policy(preset=preset)).rules(preset)
    _, applied = greedy(ctx, rules)
    names = {r.name for r in rules}
    assert applied and {m.rule for m in applied} <= names
    assert all(preset in rule_registry(Policy()).get(m.rule).presets for m in applied)
