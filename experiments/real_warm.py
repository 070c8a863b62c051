"""Real rows costed with a cold L2 (as the tool does) and with a warm one: would the replays
that timed a source have found their data in L2?

msprof op and do_bench time a kernel replayed on the same buffers. Where a row's kernel fits
in L2, its data may still be there from the replay before. For the rows of the sources named
(``--source``, substrings of the source column; TileLang's rows by default, one of which moves
96 MiB in 41 us, above the HBM peak), each kernel is costed by the simulator at its default
config as the second of two back-to-back runs; every other row cold. The table gives the
device rows' accuracy both ways.

    cd experiments && ../.venv/bin/python real_warm.py    # -> results/real_warm.csv (~10 s)
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np
from _table import RESULTS, emit

from costmodel import make_cost_model
from costmodel.measure.real import read_real
from costmodel.measure.real.evaluate import measured_kernels

ROOT = Path(__file__).resolve().parents[1]
WITHIN = math.log(1.25)


def _logs(paths: list[str], sources: list[str]) -> tuple[list[float], list[float], list[bool]]:
    """ln(predicted / real) of every device row, cold and warm, and whether it was warmed."""
    rows, problems = read_real(paths)
    for p in problems:
        print(p)
    cold, warm, warmed = [], [], []
    for row in rows:
        if row.timing != "device":
            continue
        run, kernels = measured_kernels(row)
        first = sum(c.device_us for c in make_cost_model("simulator", run).evaluate(kernels))
        again = first
        hot = any(s in row.source for s in sources)
        if hot:  # a fresh model: the second run finds what the first left in L2
            costs = make_cost_model("simulator", run).evaluate(kernels + kernels)
            again = sum(c.device_us for c in costs[len(kernels) :])
        cold.append(math.log(first / row.time_us))
        warm.append(math.log(again / row.time_us))
        warmed.append(hot)
    return cold, warm, warmed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="*", help="real-data CSVs (default datasets/real/*.csv)")
    parser.add_argument("--source", nargs="*", default=["nan2inf/tilelang-mlir-ascend"])
    parser.add_argument("--out", default=str(RESULTS / "real_warm.csv"))
    args = parser.parse_args()
    paths = args.csv or sorted(str(p) for p in (ROOT / "datasets/real").glob("*.csv"))
    cold, warm, warmed = _logs(paths, args.source)
    table: list[dict[str, Any]] = []
    for rows, pick in (("all", [True] * len(cold)), ("warmed", warmed)):
        for name, logs in (("cold", cold), ("warm", warm)):
            a = np.abs([v for v, p in zip(logs, pick, strict=True) if p])
            table.append(
                {
                    "rows": rows,
                    "n": len(a),
                    "l2": name,
                    "median_ln": round(float(np.median(a)), 3),
                    "within_25": round(float(np.mean(a <= WITHIN)), 3),
                }
            )
    emit(table, args.out, width=10)


if __name__ == "__main__":
    main()
