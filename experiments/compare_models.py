"""Analytic vs simulator: per-kernel spread on the `none` plan of every zoo model.

Reports, per model and overall, the median and p90 of |analytic - simulator| / simulator over
all single-op kernels, and the plan totals. Writes experiments/results/compare_models.csv.

    .venv/bin/python experiments/compare_models.py                 # all zoo models, full size
    .venv/bin/python experiments/compare_models.py --models bert-base --layers 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _table import emit  # experiments/_table.py (scripts run from this folder)

from autotune.zoo import build, list_models
from costmodel.lower import Lowering
from costmodel.registry import make_cost_model
from costmodel.spec import load_target
from search_space import load_graph
from search_space.groups import singleton_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[m.name for m in list_models()])
    parser.add_argument("--layers", type=int, default=None, help="llama3-8b layers (default 32)")
    parser.add_argument("--target", default="ascend910b")
    parser.add_argument(
        "--csv", default=str(Path(__file__).parent / "results" / "compare_models.csv")
    )
    args = parser.parse_args()
    target = load_target(args.target)
    rows, spreads = [], []
    for name in args.models:
        layers = args.layers if name == "llama3-8b" else None
        graph = load_graph(build(name, weights="inputs", layers=layers))
        kernels = Lowering(graph, target).kernels(singleton_groups(graph))
        t0 = time.perf_counter()
        a = make_cost_model("analytic", target).predict(kernels)
        t1 = time.perf_counter()
        s = make_cost_model("simulator", target).predict(kernels)
        t2 = time.perf_counter()
        rel = np.abs(a - s) / s
        spreads.append(rel)
        rows.append(
            {
                "model": name,
                "kernels": len(kernels),
                "analytic_us": round(float(a.sum()), 1),
                "simulator_us": round(float(s.sum()), 1),
                "median_rel": round(float(np.median(rel)), 4),
                "p90_rel": round(float(np.percentile(rel, 90)), 4),
                "analytic_s": round(t1 - t0, 2),
                "simulator_s": round(t2 - t1, 2),
            }
        )
        print(rows[-1], flush=True)
    allrel = np.concatenate(spreads)
    rows.append(
        {
            "model": "ALL",
            "kernels": int(allrel.size),
            "analytic_us": "",
            "simulator_us": "",
            "median_rel": round(float(np.median(allrel)), 4),
            "p90_rel": round(float(np.percentile(allrel, 90)), 4),
            "analytic_s": "",
            "simulator_s": "",
        }
    )
    emit(rows, Path(args.csv))


if __name__ == "__main__":
    main()
