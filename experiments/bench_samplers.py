"""Samplers against the exact optimum: on graphs where `optimal` is computable, how close does
each sampler get, and after how many trials is it within 1% (and 2%)?

Same space and the same cost as `optimal`: the bilevel space (fusion booleans, each group at
its best config) scored by the additive analytic cost. Warm start and local search as in
`autotune tune`: none, greedy and max enqueued; every 10 trials, once the best is 10 trials
old, up to three of the cheapest untried block moves and single flips of it, the first of them
replaced by where a descent in the model from the cheapest one ends (up to `DESCENT` moves).
gp runs only where torch is installed.

    .venv/bin/python experiments/bench_samplers.py --trials 300

Writes experiments/results/bench_samplers.csv.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import optuna
from _table import RESULTS, emit  # experiments/_table.py (scripts run from this folder)

from autotune.tuner import enqueue_neighbours, make_sampler
from autotune.tuner.steps import DESCENT
from autotune.zoo import build
from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.space import SearchSpace, baseline_plan, plan_cost

CASES = [
    ("bert-base", {"layers": 1}),
    ("llama3-8b", {"layers": 1}),
    ("resnet50", {"scale": 0.1}),
    ("gpt2", {"scale": 0.1}),
    ("vit-b16", {"scale": 0.1}),
]


def first_within(values: list[float], target: float, frac: float) -> int | str:
    best = math.inf
    for i, v in enumerate(values, 1):
        best = min(best, v)
        if best <= target * (1 + frac):
            return i
    return "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--samplers", nargs="*", default=["tpe", "random", "cmaes", "gp"])
    parser.add_argument("--models", nargs="*", default=[name for name, _ in CASES])
    parser.add_argument("--csv", default=str(RESULTS / "bench_samplers.csv"))
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for name, kw in CASES:
        if name not in args.models:
            continue
        graph = load_graph(build(name, weights="inputs", **kw))
        ctx = FusionContext(graph)
        oracle = CostOracle(graph, load_target(), ctx=ctx)
        opt = plan_cost(baseline_plan("optimal", ctx, oracle), oracle)
        for sampler in args.samplers:
            numeric = sampler in ("cmaes", "gp")
            space = SearchSpace(ctx, oracle, strategy="bilevel", numeric=numeric)
            try:
                study = optuna.create_study(sampler=make_sampler(sampler, 0, 0, False))
            except Exception as err:  # gp without torch: say so in the table
                rows.append(
                    {
                        "model": name,
                        "args": kw,
                        "sampler": sampler,
                        "optimal_us": round(opt, 2),
                        "best_us": "",
                        "gap_pct": "",
                        "within_2pct": "",
                        "within_1pct": "",
                        "note": str(err)[:60],
                    }
                )
                continue
            for kind in ("none", "greedy", "max"):
                part = [
                    frozenset(n for n in g.ops if n in ctx.index)
                    for g in baseline_plan(kind, ctx, oracle).groups
                ]
                study.enqueue_trial(space.params_for(part))
            blocks = space.block_moves()

            def mutant(
                params: dict[str, Any], s: SearchSpace = space, o: CostOracle = oracle
            ) -> float:  # the tuner's scoring of a mutation
                return plan_cost(s.plan(s.chosen(params)), o)

            for _ in range(args.trials // 10):  # the tuner's loop: 10 trials, then local moves
                study.optimize(
                    lambda t, s=space, o=oracle: plan_cost(s.suggest(t), o), n_trials=10
                )
                enqueue_neighbours(study, blocks=blocks, score=mutant, depth=DESCENT)
            values = [t.value for t in study.trials if t.value is not None]
            rows.append(
                {
                    "model": name,
                    "args": kw,
                    "sampler": sampler,
                    "optimal_us": round(opt, 2),
                    "best_us": round(min(values), 2),
                    "gap_pct": round(100 * (min(values) / opt - 1), 2),
                    "within_2pct": first_within(values, opt, 0.02),
                    "within_1pct": first_within(values, opt, 0.01),
                    "note": "",
                }
            )
            print(rows[-1], flush=True)
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
