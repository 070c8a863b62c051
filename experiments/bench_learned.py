"""Kernel predictions per second inside the search: every config of every group signature
of a zoo model's none / greedy / max plans, scored in batches (one ``predict_batch`` per
group, as the bilevel search and the config grids do), analytic vs learned.

    .venv/bin/python experiments/bench_learned.py
    .venv/bin/python experiments/bench_learned.py --models bert-base llama3-8b

Writes experiments/results/bench_learned.csv. Uses the learned model shipped for the target.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _table import emit  # experiments/_table.py (scripts run from this folder)

from costmodel.analytic import AnalyticModel
from costmodel.learned import LearnedModel
from costmodel.lower import Lowering
from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import Policy
from search_space.space import baseline_plan
from search_space.zoo import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["bert-base", "resnet50", "llama3-8b"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--csv", default=str(Path(__file__).parent / "results" / "bench_learned.csv")
    )
    args = parser.parse_args()
    target = load_target()
    learned = LearnedModel(target)
    analytic = AnalyticModel(target)
    rows = []
    for name in args.models:
        graph = load_graph(
            build(name, weights="inputs", layers=2 if name == "llama3-8b" else None)
        )
        ctx = FusionContext(graph)
        oracle = CostOracle(graph, target, model=analytic, ctx=ctx)
        low = Lowering(graph, target)
        groups = {}
        for kind in ("none", "greedy", "max"):
            for g in baseline_plan(kind, ctx, oracle, Policy()).groups:
                groups.setdefault(low.signature(g), g)
        batches = [low.batch(g, low.grid(g)) for g in groups.values()]
        n = sum(len(b) for b in batches)
        row: dict[str, object] = {"model": name, "signatures": len(batches), "configs": n}
        for label, model in (("analytic", analytic), ("learned", learned)):
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                for b in batches:
                    model.predict_batch(b)
                best = min(best, time.perf_counter() - t0)
            row[f"{label}_per_s"] = round(n / best)
        rows.append(row)
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
