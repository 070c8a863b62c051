"""Samplers against the exact optimum: on graphs where `optimal` is computable, how close does
the tuner's own trial loop get with each sampler, and after how many trials is it within 1%
(and 2%)?

The loop is `autotune tune`'s (`autotune.tuner.steps`: the none/greedy/max warm start, the
sampler's trials over the bilevel space, and every 10 trials the local search: block moves and
flips of the incumbent, swaps where none of those improves, a descent in the model), with no
optimal plan enqueued and no measurement. The study's model is made additive (each group
standalone at its best config, cold L2: `plan_cost`), the cost under which `optimal`, an ILP
over candidate groups of up to six ops, is exact; a plan with a larger group can beat it.
gp runs only where torch is installed.

    .venv/bin/python experiments/bench_samplers.py --trials 200

Writes experiments/results/bench_samplers.csv.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import optuna
from _table import RESULTS, emit  # experiments/_table.py (scripts run from this folder)

from autotune.exceptions import AutotuneError
from autotune.tuner import TuneConfig, steps
from autotune.tuner.session import Session
from search_space import load_graph
from search_space.space import baseline_plan, plan_cost
from search_space.zoo import build

CASES = [
    ("bert-base", {"layers": 1}),
    ("llama3-8b", {"layers": 1}),
    ("resnet50", {"scale": 0.1}),
    ("gpt2", {"scale": 0.1}),
    ("vit-b16", {"scale": 0.1}),
    ("mobilenetv3", {"scale": 0.1}),
    ("transformer-base", {"layers": 1}),
]


def first_within(values: list[float], target: float, frac: float) -> int | str:
    best = math.inf
    for i, v in enumerate(values, 1):
        best = min(best, v)
        if best <= target * (1 + frac):
            return i
    return "-"


def _run(name: str, kw: dict, sampler: str, trials: int, tmp: Path) -> dict[str, object]:
    graph = load_graph(build(name, weights="inputs", **kw))
    config = TuneConfig(
        trials=trials,
        sampler=sampler,
        cost="analytic",
        measure_every=10 * trials,  # the search alone: nothing is measured
        storage=str(tmp / f"{name}-{sampler}.journal"),
        dataset=str(tmp / f"{name}-{sampler}.parquet"),
    )
    row: dict[str, object] = {"model": name, "args": kw, "sampler": sampler}
    try:
        s = Session.open(graph, config, name)
    except AutotuneError as err:  # gp without torch: say so in the table
        return {**row, "note": str(err)[:60]}
    s.ev.score = lambda plan: plan_cost(plan, s.oracle)  # type: ignore[method-assign]
    opt = plan_cost(baseline_plan("optimal", s.ctx, s.oracle), s.oracle)
    steps.warm_start(s)
    steps.run_trials(s)
    values = [t.value for t in s.study.trials if t.value is not None]
    return {
        **row,
        "optimal_us": round(opt, 2),
        "best_us": round(min(values), 2),
        "gap_pct": round(100 * (min(values) / opt - 1), 2),
        "within_2pct": first_within(values, opt, 0.02),
        "within_1pct": first_within(values, opt, 0.01),
        "note": "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--samplers", nargs="*", default=["tpe", "random", "cmaes", "gp"])
    parser.add_argument("--models", nargs="*", default=[name for name, _ in CASES])
    parser.add_argument("--csv", default=str(RESULTS / "bench_samplers.csv"))
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in CASES:
            if name not in args.models:
                continue
            for sampler in args.samplers:
                rows.append(_run(name, kw, sampler, args.trials, Path(tmp)))
                print(rows[-1], flush=True)
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
