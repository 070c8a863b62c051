"""The greedy baseline applies exactly its preset's rules (the baselines costed on every zoo
model, optimal <= max, optimal <= greedy <= none: tests/costmodel/test_search_space_costed.py)."""

from __future__ import annotations

import pytest

from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import Policy, greedy, rule_registry
from search_space.zoo import build

SMALL = {"llama3-8b": {"scale": 0.05, "layers": 2}}


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
