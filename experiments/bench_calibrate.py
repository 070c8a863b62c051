"""Calibration rows per minute: in this process, in a process pool and on a Dask cluster.

The same sampled kernels (one zoo model at full size and at scale 0.25, the same seed) are
simulated with ``--jobs 1``, ``--jobs 2`` and on a local Dask cluster of two worker processes
(``--dask local --jobs 2``), each in a fresh process (a simulator's memo would otherwise carry
over to the next mode: a forked pool inherits it); each run's table must equal the first one's.
Rows per minute count the simulation alone (sampling is the same serial work in every mode);
``wall_s`` is the whole run, ``startup_s`` the cluster's start, ``load_1m`` the machine's load
average after the run (other work on a shared machine slows every mode). Prints a table and
writes experiments/results/bench_calibrate.csv.

    .venv/bin/python experiments/bench_calibrate.py --samples 300
    .venv/bin/python experiments/bench_calibrate.py --samples 300 --models gpt2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Executor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from _table import emit  # experiments/_table.py (scripts run from this folder)
from pandas.testing import assert_frame_equal

from costmodel.measure import read_table
from costmodel.measure.cluster import dask_executor
from costmodel.measure.sample import calibrate_tables
from costmodel.spec import load_target
from search_space.zoo import ZooOptions, load_model_spec

MODES = (("jobs 1", 1, False), ("jobs 2", 2, False), ("dask local x2", 2, True))


def sources(model: str) -> list[tuple[str, str, Any]]:
    """The model at full size and at scale 0.25, as ``autotune calibrate --models`` takes it."""
    spec = f"zoo:{model}"
    small = load_model_spec(spec, zoo=ZooOptions(scale=0.25))
    return [(spec, model, load_model_spec(spec)), (f"{spec}@0.25", model, small)]


def run(mode: str, jobs: int, dask: bool, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    marks: dict[str, float] = {}
    t0 = time.perf_counter()
    pool: AbstractContextManager[Executor | None] = (
        dask_executor("local", workers=jobs) if dask else nullcontext()
    )
    with pool as executor:
        marks["started"] = time.perf_counter()
        summary = calibrate_tables(
            sources(args.models),
            load_target(args.target),
            out,
            samples=args.samples,
            seed=args.seed,
            jobs=jobs,
            executor=executor,
            on_total=lambda _: marks.setdefault("sim", time.perf_counter()),
            progress=lambda _: marks.__setitem__("done", time.perf_counter()),
        )
    wall = time.perf_counter() - t0
    sim = marks["done"] - marks["sim"]
    return {
        "mode": mode,
        "rows": summary["rows"],
        "startup_s": round(marks["started"] - t0, 1),
        "simulate_s": round(sim, 1),
        "wall_s": round(wall, 1),
        "rows_per_min": round(summary["rows"] / sim * 60),
        "load_1m": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", default="bert-base", help="one zoo model")
    parser.add_argument("--target", default="ascend910b")
    parser.add_argument(
        "--csv", default=str(Path(__file__).parent / "results" / "bench_calibrate.csv")
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a mode, in this process
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run(*MODES[args.one], args, args.out)))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tables = []
        for i in range(len(MODES)):
            out = Path(tmp) / str(i) / "t.parquet"
            out.parent.mkdir()
            cmd = [sys.executable, __file__, *sys.argv[1:], "--one", str(i), "--out", str(out)]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            tables.append(read_table(out))
            assert_frame_equal(tables[-1], tables[0])  # every mode writes the same table
            row["same_table"] = True
            print(row, flush=True)
            rows.append(row)
    emit(rows, args.csv)


if __name__ == "__main__":  # a Dask cluster's worker processes import this file again
    main()
