"""Analytic vs simulator: per-kernel spread on the `none` plan of every zoo model.

Reports, per model and overall, the median and p90 of |analytic - simulator| / simulator over
all single-op kernels (default configs), for the analytic model with the spec's constants
(``raw``) and with the shipped fitted ones (``cal``), and the plan totals. Writes
experiments/results/compare_models.csv.

    .venv/bin/python experiments/compare_models.py                 # all zoo models, full size
    .venv/bin/python experiments/compare_models.py --models bert-base --layers 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _table import emit  # experiments/_table.py (scripts run from this folder)

from costmodel.analytic import AnalyticModel
from costmodel.lower import Lowering
from costmodel.registry import make_cost_model
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import singleton_groups
from search_space.zoo import build, list_models


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
    rows = []
    spreads: dict[str, list[np.ndarray]] = {"raw": [], "cal": []}
    for name in args.models:
        layers = args.layers if name == "llama3-8b" else None
        graph = load_graph(build(name, weights="inputs", layers=layers))
        kernels = Lowering(graph, target).kernels(singleton_groups(graph))
        t0 = time.perf_counter()
        a = AnalyticModel(target, "raw").predict(kernels)
        t1 = time.perf_counter()
        s = make_cost_model("simulator", target).predict(kernels)
        t2 = time.perf_counter()
        cal = AnalyticModel(target).predict(kernels)
        row: dict[str, object] = {"model": name, "kernels": len(kernels)}
        for label, pred in (("raw", a), ("cal", cal)):
            rel = np.abs(pred - s) / s
            spreads[label].append(rel)
            row[f"{label}_us"] = round(float(pred.sum()), 1)
            row[f"{label}_median_rel"] = round(float(np.median(rel)), 4)
            row[f"{label}_p90_rel"] = round(float(np.percentile(rel, 90)), 4)
        row.update(
            simulator_us=round(float(s.sum()), 1),
            analytic_s=round(t1 - t0, 2),
            simulator_s=round(t2 - t1, 2),
        )
        rows.append(row)
        print(rows[-1], flush=True)
    total: dict[str, object] = {"model": "ALL", "kernels": sum(len(x) for x in spreads["raw"])}
    for label, parts in spreads.items():
        allrel = np.concatenate(parts)
        total[f"{label}_us"] = ""
        total[f"{label}_median_rel"] = round(float(np.median(allrel)), 4)
        total[f"{label}_p90_rel"] = round(float(np.percentile(allrel, 90)), 4)
    rows.append({**total, "simulator_us": "", "analytic_s": "", "simulator_s": ""})
    emit(rows, Path(args.csv))


if __name__ == "__main__":
    main()
