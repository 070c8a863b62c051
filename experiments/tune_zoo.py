"""Tuning table for the zoo at full size (weights as inputs): none, greedy, max, tuned
(all measured on the simulator, no noise), roofline, speedups, trials and wall time.

    .venv/bin/python experiments/tune_zoo.py --trials 120            # all seven models
    .venv/bin/python experiments/tune_zoo.py --models bert-base --trials 60

Writes experiments/results/tune_zoo.csv. Each model gets a fresh journal in a temp folder.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from _table import emit  # experiments/_table.py (scripts run from this folder)

from autotune.tuner import TuneConfig, tune_graph
from costmodel.lower import Lowering
from costmodel.oracle import CostOracle
from costmodel.registry import make_cost_model
from costmodel.roofline import roofline_us
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import Policy
from search_space.space import baseline_plan
from search_space.zoo import build, list_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[m.name for m in list_models()])
    parser.add_argument("--trials", type=int, default=120)
    parser.add_argument("--llama-layers", type=int, default=32)
    parser.add_argument("--csv", default=str(Path(__file__).parent / "results" / "tune_zoo.csv"))
    args = parser.parse_args()
    target = load_target()
    rows = []
    for name in args.models:
        layers = args.llama_layers if name == "llama3-8b" else None
        graph = load_graph(build(name, weights="inputs", layers=layers))
        ctx = FusionContext(graph)
        oracle = CostOracle(graph, target, ctx=ctx)
        sim = make_cost_model("simulator", target)
        low = Lowering(graph, target)
        plan = baseline_plan("max", ctx, oracle, Policy())
        max_us = float(
            sim.predict(
                [low.kernel(g, c) for g, c in zip(plan.groups, plan.configs, strict=True)]
            ).sum()
        )
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            result = tune_graph(
                graph,
                TuneConfig(
                    trials=args.trials,
                    storage=str(Path(tmp) / "s.journal"),
                    policy=Policy(safe_mode=False),
                ),
                name=name,
            )
            wall = time.perf_counter() - t0
        base = result.baseline_us
        rows.append(
            {
                "model": name,
                "layers": layers or "",
                "none_us": round(base["none"], 1),
                "greedy_us": round(base["greedy"], 1),
                "max_us": round(max_us, 1),
                "tuned_us": round(result.best_latency_us, 1),
                "roofline_us": round(roofline_us(graph, target), 1),
                "speedup_vs_none": round(base["none"] / result.best_latency_us, 3),
                "speedup_vs_greedy": round(base["greedy"] / result.best_latency_us, 3),
                "trials": result.trials,
                "wall_s": round(wall, 1),
            }
        )
        print(rows[-1], flush=True)
    geo = float(np.exp(np.mean([np.log(r["speedup_vs_greedy"]) for r in rows])))
    print(f"geometric mean speedup vs greedy: {geo:.3f}")
    emit(rows, Path(args.csv))


if __name__ == "__main__":
    main()
