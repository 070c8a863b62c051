"""The cost models' per-pipe busy times against msprof's, on the real rows that publish them.

A kernel's total time can agree with the hardware for the wrong reasons (a pipe too slow and
another too fast). The real-data rows with ``vec_us``/``mte2_us``/``mte3_us`` columns
(``datasets/real/``: PyAsc's RMSNorm pipeline detail on a 910B4; TileLang's Add+RMSNorm and
RoPE utilisation shares on a 910B) say how long each pipe was busy. Each such row's kernel is
costed at its default config, as ``autotune costmodel eval --real`` does, by the simulator
and the analytic model; per op family, kernel kind and pipe the table gives the geometric mean
of model / measured busy time and the median ``|ln|`` of it. The models report the busiest
core's busy time, msprof the mean over the cores that ran: on these evenly split kernels the
two differ by a tile at most. A model's vector pipe also holds each loop iteration's scalar
bookkeeping (``scalar_iter_cycles``), which msprof counts as Scalar: ``V`` is compared net of
it (the busiest core's iterations times that cost), ``V+scalar`` as the model has it.

    cd experiments && ../.venv/bin/python real_pipes.py    # -> results/real_pipes.csv
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from _table import RESULTS, emit

from costmodel import make_cost_model
from costmodel.measure.real import read_real
from costmodel.measure.real.evaluate import measured_kernels

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("simulator", "analytic")


def _ratios(paths: list[str]) -> dict[tuple[str, str, str, str], list[float]]:
    """(model, family, impl, pipe) -> model / measured busy time, one per row."""
    rows, problems = read_real(paths)
    for p in problems:
        print(p)
    out: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for row in rows:
        if not row.pipes or row.timing != "device":
            continue
        run, kernels = measured_kernels(row)
        if len(kernels) != 1:
            continue  # one measured pipe time cannot be split between kernels
        [kernel] = kernels
        spec = run.spec
        iterations = kernel.waves * kernel.steps  # the busiest core's loop iterations
        scalar_us = iterations * spec.scalar_iter_cycles / spec.clock_hz * 1e6
        for name in MODELS:
            busy = dict(make_cost_model(name, run).evaluate([kernel])[0].pipes_us)
            if "V" in row.pipes and busy.get("V", 0.0) > 0:
                out[name, row.family, row.impl, "V+scalar"].append(busy["V"] / row.pipes["V"])
                busy["V"] = max(busy["V"] - scalar_us, 1e-3)
            for pipe, real in row.pipes.items():
                if busy.get(pipe, 0.0) > 0:
                    out[name, row.family, row.impl, pipe].append(busy[pipe] / real)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="*", help="real-data CSVs (default datasets/real/*.csv)")
    parser.add_argument("--out", default=str(RESULTS / "real_pipes.csv"))
    args = parser.parse_args()
    paths = args.csv or sorted(str(p) for p in (ROOT / "datasets/real").glob("*.csv"))
    table: list[dict[str, Any]] = []
    for (model, family, impl, pipe), ratios in sorted(_ratios(paths).items()):
        logs = np.log(ratios)
        table.append(
            {
                "model": model,
                "family": family,
                "impl": impl,
                "pipe": pipe,
                "rows": len(ratios),
                "geomean": round(math.exp(float(logs.mean())), 2),
                "median_ln": round(float(np.median(np.abs(logs))), 3),
                "min": round(min(ratios), 2),
                "max": round(max(ratios), 2),
            }
        )
    emit(table, args.out, width=10)


if __name__ == "__main__":
    main()
