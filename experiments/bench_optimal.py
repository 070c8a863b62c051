"""Benchmark: the exact optimal fusion partition on the small zoo and single full-width layers.

For each model: kernel ops, candidate groups, independent blocks, lazy cycle cuts, wall time,
and the plan cost (sum of standalone best-config analytic kernel costs, us) of the optimum
against `none` (every op alone) and `max` (every legal edge fused, repaired). All three plans
are scored with the same cost callback, so the comparison is exact under the additive cost.
Prints a table and writes experiments/results/bench_optimal.csv.

    .venv/bin/python experiments/bench_optimal.py
    .venv/bin/python experiments/bench_optimal.py --max-ops 8 --cases bert-base@layers=1
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.space import OptimalUnavailable, optimal_partition
from search_space.zoo import build

CASES = [
    "bert-base@scale=0.1",
    "gpt2@scale=0.1",
    "llama3-8b@scale=0.05",
    "mobilenetv3@scale=0.1",
    "resnet50@scale=0.1",
    "transformer-base@scale=0.1",
    "vit-b16@scale=0.1",
    "bert-base@layers=1",
    "llama3-8b@layers=1",
]
COLUMNS = [
    "model",
    "args",
    "kernel_ops",
    "candidates",
    "blocks",
    "cuts",
    "seconds",
    "none_us",
    "max_us",
    "optimal_us",
    "optimal_vs_max_pct",
    "groups_max",
    "groups_optimal",
    "status",
]


def parse_case(case: str) -> tuple[str, dict[str, Any]]:
    name, _, rest = case.partition("@")
    kwargs: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        kwargs[key] = float(value) if key == "scale" else int(value)
    return name, kwargs


def run_case(case: str, max_ops: int, time_limit: float, target: str) -> dict[str, Any]:
    name, kwargs = parse_case(case)
    graph = load_graph(build(name, weights="inputs", **kwargs))
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target(target))

    def cost(ops: frozenset[str]) -> float:
        return oracle.best(ctx.to_groups([ops])[0])[1]

    def feasible(ops: frozenset[str]) -> bool:
        return oracle.feasible(ctx.to_groups([ops])[0].ops)

    def plan_cost(plan: list[frozenset[str]], f: Callable[[frozenset[str]], float]) -> float:
        return sum(f(p) for p in plan)

    max_plan = ctx.repair(ctx.edges, feasible)
    none_us = plan_cost([frozenset([n]) for n in ctx.nodes], cost)
    max_us = plan_cost(max_plan, cost)
    row: dict[str, Any] = {
        "model": name,
        "args": ",".join(f"{k}={v}" for k, v in kwargs.items()),
        "kernel_ops": len(ctx.nodes),
        "none_us": round(none_us, 2),
        "max_us": round(max_us, 2),
        "groups_max": len(max_plan),
    }
    start = time.monotonic()
    try:
        res = optimal_partition(
            ctx, cost, feasible=feasible, extra_groups=max_plan, max_ops=max_ops,
            time_limit=time_limit,
        )  # fmt: skip
    except OptimalUnavailable as exc:
        row |= {"seconds": round(time.monotonic() - start, 2), "status": str(exc)}
        return row
    return row | {
        "candidates": res.candidates,
        "blocks": res.blocks,
        "cuts": res.cuts,
        "seconds": round(res.seconds, 2),
        "optimal_us": round(res.cost, 2),
        "optimal_vs_max_pct": round(100.0 * (res.cost - max_us) / max_us, 2),
        "groups_optimal": len(res.partition),
        "status": res.status,
    }


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Atomic: a temp file beside the target, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=CASES, help="model@key=value,...")
    parser.add_argument("--max-ops", type=int, default=6)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--target", default="ascend910b")
    default_csv = Path(__file__).parent / "results" / "bench_optimal.csv"
    parser.add_argument("--csv", type=Path, default=default_csv)
    args = parser.parse_args()

    rows = [run_case(c, args.max_ops, args.time_limit, args.target) for c in args.cases]
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in COLUMNS}
    widths["status"] = 8
    print(" | ".join(f"{c:>{widths[c]}}" for c in COLUMNS))
    for row in rows:
        print(" | ".join(f"{str(row.get(c, ''))[: widths[c]]:>{widths[c]}}" for c in COLUMNS))
    write_csv(rows, args.csv)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
