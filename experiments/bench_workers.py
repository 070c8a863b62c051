"""Worker processes on one study (issue 26): trials per minute with 1, 2 and 4 concurrent
`autotune tune` processes, on the journal file and on PostgreSQL.

    cd experiments && ../.venv/bin/python bench_workers.py                # 1,2,4 x 12 trials
    cd experiments && ../.venv/bin/python bench_workers.py --trials 6 --workers 1,2

Every setting starts from fresh storage: a new journal file, or a new database on a temporary
PostgreSQL server on loopback (started by tests/autotune/pg_server.py, durable: it syncs its
log at each commit as the journal file syncs each write). Each worker tunes the same study
with a fixed budget (``--trials``), its own seed and its own folder, analytic cost model, safe
mode off, measured only at the end (``--measure-every`` above the budget), so the trials are
what is timed. ``trials/min`` counts the study's complete trials over its trials phase (the
first trial's start to the last one's end, read from the storage); ``wall s`` is launch to the
last worker's exit (imports, setup and the final picks too). ``complete`` must be workers x
trials: nothing lost. Writes experiments/results/bench_workers.csv.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import optuna
from _table import RESULTS, emit  # experiments/_table.py (scripts run from this folder)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "autotune"))

from pg_server import PgServer, pg_server  # the tests' server: one copy

from autotune.tuner.study import open_storage

REPO = Path(__file__).resolve().parent.parent
COMPLETE = optuna.trial.TrialState.COMPLETE


@contextmanager
def _storages(kinds: list[str]) -> Iterator[dict[str, PgServer | None]]:
    """The PostgreSQL server when asked for (one for all settings: a database each)."""
    with ExitStack() as stack:
        yield {
            k: stack.enter_context(pg_server(durable=True)) if k == "postgres" else None
            for k in kinds
        }


def run_setting(
    storage: str, workers: int, trials: int, model: list[str], folder: Path
) -> dict[str, object]:
    """``workers`` processes on one fresh study; the row for the table."""
    argv = [*model, "--cost", "analytic", "--unsafe", "--polish", "0",
            "--measure-every", str(trials + 1), "--trials", str(trials),
            "--storage", storage, "--study", "bench"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    procs = []
    for i in range(workers):
        cwd = folder / f"w{i}"
        cwd.mkdir(parents=True)
        cmd = [sys.executable, "-m", "autotune", "tune", *argv, "--seed", str(i), "-o", "p.json"]
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))  # fmt: skip
    failed = 0
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            failed += 1
            print(f"worker failed ({proc.returncode}): {err.strip()[-500:]}", file=sys.stderr)
    wall = time.perf_counter() - start
    study = optuna.load_study(study_name="bench", storage=open_storage(storage)[0])
    done = [t for t in study.trials if t.state == COMPLETE]
    starts = [t.datetime_start for t in done if t.datetime_start]
    ends = [t.datetime_complete for t in done if t.datetime_complete]
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else float("nan")
    return {
        "workers": workers,
        "trials": workers * trials,
        "complete": len(done),
        "failed workers": failed,
        "trials s": round(span, 1),
        "trials/min": round(len(done) / span * 60, 1) if span > 0 else "",
        "wall s": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12, help="trials per worker")
    parser.add_argument("--workers", default="1,2,4", help="concurrent workers, comma-separated")
    parser.add_argument("--storages", default="journal,postgres")
    parser.add_argument("--model", default="zoo:bert-base --layers 1 --scale 0.25")
    parser.add_argument("--csv", default=str(RESULTS / "bench_workers.csv"))
    args = parser.parse_args()
    kinds = args.storages.split(",")
    rows = []
    with _storages(kinds) as servers, tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            for n in (int(w) for w in args.workers.split(",")):
                folder = Path(tmp) / f"{kind}-{n}"
                server = servers[kind]
                if server is None:
                    folder.mkdir()
                    storage = str(folder / "s.journal")
                else:
                    storage = server.create_db(f"bench_{n}")
                row = run_setting(storage, n, args.trials, args.model.split(), folder)
                rows.append({"storage": kind, **row})
                print(rows[-1], flush=True)
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
