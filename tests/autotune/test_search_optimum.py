"""The study's search against the exact optimum (docs/tuning.md).

Under the additive analytic cost, where the ``optimal`` baseline (an ILP over candidate groups
of up to six ops) is exact, the tuner's own trial loop (its sampler, the none/greedy/max warm
start and, every ten trials, its local search: block moves, flips and, at a local optimum of
those, swaps, with the descent in the model) must end within 1% of that optimum in 60 trials,
with no optimal plan enqueued. The ILP is the independent oracle; the study's model is made
additive (each kernel standalone, cold L2) so that the two rank plans alike.

A study's trials do not depend on its budget (the sampler is seeded, nothing is measured, the
local search runs every ten trials), so 60 trials are the first 60 of a 200-trial study; in
200-trial runs the bert-base layer got within 1% at trial 20 (a local search's move) and the
gpt2 layer at trial 2 (the max warm start): three times the trials needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.tuner import TuneConfig, steps
from autotune.tuner.session import Session
from search_space import load_graph
from search_space.space import baseline_plan, plan_cost
from search_space.zoo import build

TRIALS = 60


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "kw"), [("bert-base", {"layers": 1}), ("gpt2", {"layers": 1, "scale": 0.25})]
)
def test_the_trial_loop_ends_within_one_percent_of_the_exact_optimum(
    model: str, kw: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = load_graph(build(model, weights="inputs", **kw))
    config = TuneConfig(
        trials=TRIALS,
        cost="analytic",
        measure_every=10 * TRIALS,  # no measurement: the search alone, in the model
        storage=str(tmp_path / "s.journal"),
        dataset=str(tmp_path / "rows.parquet"),
    )
    s = Session.open(graph, config, model)
    monkeypatch.setattr(s.ev, "score", lambda plan: plan_cost(plan, s.oracle))
    optimum = plan_cost(baseline_plan("optimal", s.ctx, s.oracle), s.oracle)
    steps.warm_start(s)
    steps.run_trials(s)
    assert len(s.complete()) == TRIALS
    assert s.study.best_value <= optimum * 1.01, (s.study.best_value, optimum)
