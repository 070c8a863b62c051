"""SIGKILL injected into real `autotune tune` runs, then a resume (issue 23's crash report):
per fault point, how many kills landed, the trials complete before them, and what the resume
lost (must be 0), left RUNNING (0), retried, and whether every plan file stayed whole.

    cd experiments && ../.venv/bin/python crash_faults.py            # -> results/crash_faults.csv
    cd experiments && ../.venv/bin/python crash_faults.py --kills 4  # fewer points per fault

The study: one bert-base layer of the zoo (scale 0.25) as an ONNX file, 10 analytic trials,
measured every 4. A fault at its k-th arrival for k = 1..``--kills`` (a k the run never
reaches is counted as ``not reached``): a trial being recorded, a plan being
simulated, any output renamed into place, the plan renamed into place, and the journal's lock
held by a process that dies.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path

from _table import RESULTS, emit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from crash_helpers import FAULTS, RUNNING, lost, plan_whole, run, trials, tune_args

from search_space.zoo import build

KILLED = -signal.SIGKILL
COLUMNS = (
    "faults", "killed", "not reached", "complete before", "trials lost", "left running",
    "retried", "plan not whole", "lock waited", "resume failed",
)  # fmt: skip


def inject(folder: Path, fault: str, k: int) -> Counter[str]:
    """One fault in a fresh study (the lock: in a study two trials old), then a resume."""
    out: Counter[str] = Counter(faults=1)
    if fault == "journal lock" and run(folder, tune_args(folder, 2)).returncode != 0:
        out["setup failed"] += 1
        return out
    argv = [] if fault == "journal lock" else tune_args(folder, 10)
    if run(folder, argv, fault, k).returncode != KILLED:
        out["not reached"] += 1
        return out
    out["killed"] += 1
    before = trials(folder)
    out["complete before"] += sum(1 for t in before if t.state.name == "COMPLETE")
    res = run(folder, tune_args(folder, 3))
    after = trials(folder)
    out["resume failed"] += res.returncode != 0
    out["trials lost"] += lost(before, after)
    out["left running"] += sum(1 for t in after if t.state == RUNNING)
    out["retried"] += sum(1 for t in after if "retry_of" in t.user_attrs)
    out["plan not whole"] += not plan_whole(folder)
    out["lock waited"] += fault == "journal lock" and "broke journal lock" not in res.stderr
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=6, help="arrivals k = 1..N per fault")
    parser.add_argument("--csv", default=str(RESULTS / "crash_faults.csv"))
    args = parser.parse_args()
    model = build("bert-base", layers=1, scale=0.25).SerializeToString()
    rows = []
    for fault in FAULTS:
        total: Counter[str] = Counter()
        ks = [1] if fault in ("journal lock", "plan write") else range(1, args.kills + 1)
        for k in ks:
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                (folder / "m.onnx").write_bytes(model)
                total.update(inject(folder, fault, k))
        rows.append({"fault": fault, **{c: total.get(c, 0) for c in COLUMNS}})
    emit(rows, args.csv, width=9)
    bad = sum(r["trials lost"] + r["left running"] + r["plan not whole"] for r in rows)
    print("nothing lost" if bad == 0 else f"{bad} defects")


if __name__ == "__main__":
    main()
