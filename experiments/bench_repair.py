"""Time of one repair (chosen edges -> a legal partition) on zoo models, random edge sets.

Each model's fusible edges are switched on at random (70%, seeded), 300 sets per round; a
round repairs every set once through ``FusionContext.repair`` (the incremental repair the
tuner uses), and the table gives the median round's time per repair over ``--rounds``.

    cd experiments && ../.venv/bin/python bench_repair.py     # -> results/bench_repair.csv
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _table import RESULTS, emit

from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.zoo import build


def bench(name: str, sets: int, rounds: int) -> dict[str, object]:
    ctx = FusionContext(load_graph(build(name, weights="inputs")))
    rng = np.random.default_rng(0)
    chosen = [
        [e for e, u in zip(ctx.edges, rng.random(len(ctx.edges)), strict=True) if u < 0.7]
        for _ in range(sets)
    ]
    times = []
    for _ in range(rounds):
        ctx = FusionContext(ctx.graph)  # a fresh repairer: no state kept from the last round
        start = time.perf_counter()
        for edges in chosen:
            ctx.repair(edges)
        times.append((time.perf_counter() - start) / sets * 1e3)
    return {
        "model": name,
        "ops": len(ctx.nodes),
        "edges": len(ctx.edges),
        "median_ms": round(statistics.median(times), 2),
        "min_ms": round(min(times), 2),
        "max_ms": round(max(times), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["bert-base", "llama3-8b", "resnet50"])
    parser.add_argument("--sets", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = [bench(m, args.sets, args.rounds) for m in args.models]
    emit(rows, RESULTS / "bench_repair.csv")


if __name__ == "__main__":
    main()
