"""The pinned behaviour (tests/golden/zoo.json) holds: figures move only on purpose.

A change meant to move figures regenerates the file (``python tests/golden_zoo.py``) and the
commit shows the diff; any other change keeps this green.
"""

from __future__ import annotations

import golden_zoo as golden
import pytest


@pytest.fixture(scope="module")
def pinned() -> dict:
    return golden.load()


@pytest.mark.parametrize("model", golden.models())
def test_baseline_plans_cost_what_they_cost(pinned: dict, model: str) -> None:
    now = {p: {c: golden.estimate(model, p, c) for c in golden.COSTS} for p in golden.PLANS}
    assert golden.close(pinned["estimates"][model], now, model) == []


def test_a_fixed_seed_study_writes_the_pinned_plan(pinned: dict) -> None:
    want = {k: v for k, v in pinned["study"].items() if k != "args"}
    assert golden.close(want, golden.study(), "study") == []


def test_every_zoo_model_is_pinned(pinned: dict) -> None:
    assert sorted(pinned["estimates"]) == sorted(golden.models())


def test_the_comparison_sees_a_moved_figure() -> None:
    a = {"x": [1.0, 2.0], "n": 3}
    assert golden.close(a, {"x": [1.0, 2.0 * (1 + 2 * golden.RTOL)], "n": 3}) != []
    assert golden.close(a, {"x": [1.0, 2.0], "n": 4}) != []
    assert golden.close(a, {"x": [1.0, 2.0 * (1 + golden.RTOL / 2)], "n": 3}) == []
