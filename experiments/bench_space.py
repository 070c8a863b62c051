"""Benchmark: search-space construction and the bilevel config search (issue: search space).

* candidates + space for llama3-8b with 32 layers (weights as inputs): fusible edges, edge
  classes, seconds (target < 10 s);
* bilevel config search for every group of bert-base's max plan: grid sizes and seconds
  (target < 10 s).
Writes experiments/results/bench_space.csv.

    .venv/bin/python experiments/bench_space.py
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from _table import emit  # experiments/_table.py (scripts run from this folder)

from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import Policy, match, rule_registry
from search_space.space import SearchSpace
from search_space.zoo import build


def space_row(name: str, layers: int | None) -> dict[str, object]:
    graph = load_graph(build(name, weights="inputs", layers=layers))
    t0 = time.perf_counter()
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target(), ctx=ctx)
    matches = match(ctx, rule_registry(Policy()).rules("all"))
    space = SearchSpace(ctx, oracle)
    seconds = time.perf_counter() - t0
    return {
        "bench": "candidates+space",
        "model": name,
        "layers": layers or "",
        "kernel_ops": len(ctx.nodes),
        "edges": len(ctx.edges),
        "decision_vars": space.decision_vars,
        "rule_matches": len(matches),
        "groups": "",
        "grid_median": "",
        "grid_max": "",
        "seconds": round(seconds, 2),
    }


def bilevel_row(name: str) -> dict[str, object]:
    graph = load_graph(build(name, weights="inputs"))
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target(), ctx=ctx)
    groups = ctx.to_groups(ctx.repair(ctx.edges, oracle.feasible))
    oracle = CostOracle(graph, load_target(), ctx=ctx)  # fresh: grids and costs both timed
    t0 = time.perf_counter()
    sizes = [len(oracle.grid(g)) for g in groups]
    for g in groups:
        oracle.best(g)
    seconds = time.perf_counter() - t0
    return {
        "bench": "bilevel configs (max plan)",
        "model": name,
        "layers": "",
        "kernel_ops": len(ctx.nodes),
        "edges": len(ctx.edges),
        "decision_vars": "",
        "rule_matches": "",
        "groups": len(groups),
        "grid_median": int(np.median(sizes)),
        "grid_max": max(sizes),
        "seconds": round(seconds, 2),
    }


def main() -> None:
    rows = [space_row("llama3-8b", 32), space_row("bert-base", None), bilevel_row("bert-base")]
    emit(rows, Path(__file__).parent / "results" / "bench_space.csv")


if __name__ == "__main__":
    main()
