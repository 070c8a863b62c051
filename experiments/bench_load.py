"""Benchmark: load + fold + infer + classify zoo models (issue: foundation).

Each model runs in a fresh subprocess so peak RSS is its own. Prints a table and writes
experiments/results/bench_load.csv.

    .venv/bin/python experiments/bench_load.py   # llama3-8b x32 (weights=inputs), bert-base
    .venv/bin/python experiments/bench_load.py --models bert-base gpt2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _table import emit  # experiments/_table.py (scripts run from this folder)

CHILD = r"""
import json, resource, sys, time
from search_space.zoo import build
from search_space import load_graph
name, layers = sys.argv[1], (int(sys.argv[2]) if sys.argv[2] != "-" else None)
t0 = time.perf_counter()
model = build(name, weights="inputs", layers=layers)
t1 = time.perf_counter()
data = model.SerializeToString()
t2 = time.perf_counter()
graph = load_graph(data)
t3 = time.perf_counter()
s = graph.summary()
print(json.dumps({
    "model": name, "layers": layers or "", "nodes": len(model.graph.node), "ops": s["ops"],
    "gflops": round(s["flops"] / 1e9, 1), "dynamic": len(s["dynamic_tensors"]),
    "build_s": round(t1 - t0, 3), "load_s": round(t3 - t2, 3),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["llama3-8b:32", "bert-base"])
    parser.add_argument("--csv", default=str(Path(__file__).parent / "results" / "bench_load.csv"))
    args = parser.parse_args()
    rows = []
    for spec in args.models:
        name, _, layers = spec.partition(":")
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, name, layers or "-"],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    emit(rows, Path(args.csv))


if __name__ == "__main__":
    main()
