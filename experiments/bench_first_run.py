"""Benchmark: the README's main job as a new user meets it (issue 46, item 3).

``make run`` tunes the default zoo model with the default flags in a fresh folder: this runs
``autotune tune zoo:bert-base -o plan.json`` (everything installed; the install itself is
not timed) RUNS times, each in a new temporary folder (no journal to resume), optionally
with both cores kept busy by spinning processes, and reports per run its wall and CPU
seconds (the child's own accounting), the seconds per phase the plan records
(``meta.timing_s``: the tuning itself, start-up aside), and the plan it wrote, which must be
the same in every run. Target: under 60 s of tuning on this 2-core machine, and the same
plan every run.

    cd experiments && ../.venv/bin/python bench_first_run.py --runs 3            # idle
    cd experiments && ../.venv/bin/python bench_first_run.py --runs 2 --busy     # 2 spinners
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _table import RESULTS, emit

AUTOTUNE = Path(sys.executable).parent / "autotune"
SPIN = "while True: pass"


def one_run() -> dict[str, object]:
    """One ``autotune tune zoo:bert-base`` in a fresh folder: its times and its plan."""
    with tempfile.TemporaryDirectory(prefix="first-run-") as folder:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        subprocess.run(
            [str(AUTOTUNE), "tune", "zoo:bert-base", "-o", "plan.json"],
            cwd=folder,
            check=True,
            capture_output=True,
        )
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        plan = json.loads((Path(folder) / "plan.json").read_text())
    phases = plan["meta"]["timing_s"]
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "tuning_s": round(sum(phases.values()), 1),
        "safe_mode_s": phases.get("safe mode", 0.0),
        "measurement_s": phases.get("measurement", 0.0),
        "trials_s": phases.get("trials", 0.0),
        "plan_us": round(plan["simulated_us"], 1),
        "kernels": len(plan["groups"]),
        "plan_digest": hashlib.sha256(
            json.dumps(plan["groups"], sort_keys=True).encode()
        ).hexdigest()[:12],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="keep both cores busy meanwhile")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    spinners = (
        [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count() or 2)]
        if args.busy
        else []
    )
    try:
        rows = [{"run": n, "busy": args.busy, **one_run()} for n in range(1, args.runs + 1)]
    finally:
        for proc in spinners:
            proc.kill()
    same = len({r["plan_digest"] for r in rows}) == 1
    med = {
        k: round(statistics.median(float(r[k]) for r in rows), 1) for k in ("wall_s", "tuning_s")
    }
    rows.append(
        {"run": "median", "busy": args.busy, **med, "plan_digest": "same" if same else "DIFFER"}
    )
    name = "bench_first_run_busy.csv" if args.busy else "bench_first_run.csv"
    emit(rows, args.out or RESULTS / name, width=9)


if __name__ == "__main__":
    main()
