"""`autotune tune --storage postgresql://...` on a real PostgreSQL server (pg_server.py starts
Debian's on loopback; no mock): worker processes on one study at once lose and duplicate no
trial and agree on the plan; a worker killed mid-trial has its trial failed by the heartbeat
and retried once; a server that is not there is one line, not a traceback or a hang."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from pg_server import PgServer, find_bin, pg_server

from autotune import load_plan
from autotune.tuner.leases import RETRY_OF
from autotune.tuner.study import open_storage
from search_space.zoo import build

COMPLETE, RUNNING, FAIL, WAITING = (
    optuna.trial.TrialState.COMPLETE,
    optuna.trial.TrialState.RUNNING,
    optuna.trial.TrialState.FAIL,
    optuna.trial.TrialState.WAITING,
)
ZOO = ("bert-base", {"layers": 1, "scale": 0.1})
MODEL = ["zoo:bert-base", "--layers", "1", "--scale", "0.1"]
ARGS = [*MODEL, "--cost", "analytic", "--unsafe", "--polish", "0", "--measure-every", "3"]
WORKERS, TRIALS = 3, 4
BEAT = {"AUTOTUNE_HEARTBEAT_S": "1", "AUTOTUNE_GRACE_S": "2"}  # a dead worker's grace: 2 s
REPO = Path(__file__).parents[2]

# a worker that kills itself (SIGKILL: no cleanup) while its second trial is being recorded
KILLED_IN_TRIAL = """
import os, signal, sys
import autotune.tuner.steps as steps
real, n = steps.describe_trial, [0]
def describe_trial(s, trial, plan):
    n[0] += 1
    if n[0] == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(s, trial, plan)
steps.describe_trial = describe_trial
from autotune.cli.app import main
sys.argv = ["autotune", *{argv!r}]
main()
"""


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    missing = ""
    try:
        find_bin()
    except RuntimeError as err:
        missing = str(err)
    if missing:  # CI installs them (`make postgres`): missing is a failure, not a skip
        pytest.fail(missing, pytrace=False)
    with pg_server() as running:
        yield running


def _argv(url: str, trials: int, seed: int = 0, out: str = "p.json") -> list[str]:
    return ["tune", *ARGS, "--trials", str(trials), "--storage", url, "--study", "st",
            "--seed", str(seed), "-o", out]  # fmt: skip


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **BEAT, "PYTHONPATH": path}


def _worker(folder: Path, argv: list[str], code: str = "") -> subprocess.Popen[str]:
    """``autotune`` in a child process in its own folder (as on its own machine)."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "autotune", *argv]
    return subprocess.Popen(cmd, cwd=folder, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def _run(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    proc = _worker(folder, argv)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="st", storage=open_storage(url)[0]).trials


def _choice(path: Path) -> list[tuple[tuple[str, ...], str, str]]:
    """What a plan chose: each group's ops, kind and config (no timings, no meta)."""
    groups = json.loads(path.read_text())["groups"]
    return sorted(
        (tuple(g["ops"]), g["kind"], json.dumps(g.get("config"), sort_keys=True)) for g in groups
    )


@dataclass(frozen=True)
class Workers:
    url: str
    folders: list[Path]  # in the order the workers finished
    results: list[subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def workers(server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Workers:
    """WORKERS processes tuning one study on one database at the same time, each in its own
    folder with its own seed (so their first, random trials differ)."""
    url, root = server.create_db("workers"), tmp_path_factory.mktemp("workers")
    folders = [root / f"w{i}" for i in range(WORKERS)]
    procs = {f: _worker(f, _argv(url, TRIALS, seed=i)) for i, f in enumerate(folders)}
    done: list[Path] = []
    results: list[subprocess.CompletedProcess[str]] = []
    deadline = time.monotonic() + 300
    while procs and time.monotonic() < deadline:
        for folder, proc in list(procs.items()):
            if proc.poll() is not None:
                out, err = proc.communicate()
                done.append(folder)
                results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
                del procs[folder]
        time.sleep(0.05)
    for proc in procs.values():
        proc.kill()
    assert not procs, "a worker did not finish in 300 s"
    return Workers(url, done, results)


def test_workers_on_one_study_lose_and_duplicate_no_trial(workers: Workers) -> None:
    for res in workers.results:
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
    trials = _trials(workers.url)
    assert [t.number for t in trials] == list(range(len(trials)))  # unique, no gap
    states = [t.state for t in trials]
    assert RUNNING not in states and FAIL not in states
    # every worker ran its --trials, all recorded: the union is their sum, none lost
    assert states.count(COMPLETE) == WORKERS * TRIALS
    assert all(t.user_attrs.get("plan_key") for t in trials if t.state == COMPLETE)
    model = build(ZOO[0], **ZOO[1])
    for folder in workers.folders:
        plan = load_plan(folder / "p.json", model=model)  # whole, and for this model
        assert plan.record.meta["study"] == "st"


def test_the_plan_is_the_one_a_single_process_picks_from_the_storage(
    workers: Workers, tmp_path: Path
) -> None:
    finals = []
    for i in range(2):  # twice: the pick from a finished storage is reproducible
        res = _run(tmp_path / f"final{i}", _argv(workers.url, 0, out="final.json"))
        assert res.returncode == 0, res.stderr
        finals.append(_choice(tmp_path / f"final{i}" / "final.json"))
    assert finals[0] == finals[1]
    assert _choice(workers.folders[-1] / "p.json") == finals[0]  # the last worker's plan


def test_a_worker_killed_mid_trial_has_it_failed_and_retried_once(
    server: PgServer, tmp_path: Path
) -> None:
    url = server.create_db("killed")
    killed = _worker(tmp_path / "a", [], KILLED_IN_TRIAL.format(argv=_argv(url, 6)))
    killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL
    (left,) = [t for t in _trials(url) if t.state == RUNNING]
    time.sleep(int(BEAT["AUTOTUNE_GRACE_S"]) + 1)  # its heartbeat is now older than the grace
    res = _run(tmp_path / "b", _argv(url, 3, seed=1))
    assert res.returncode == 0, res.stderr
    after = _trials(url)
    assert after[left.number].state == FAIL
    retries = [t for t in after if RETRY_OF in t.user_attrs]
    assert [t.user_attrs[RETRY_OF] for t in retries] == [left.number]  # once
    assert retries[0].state == COMPLETE and retries[0].params == left.params
    assert retries[0].user_attrs["origin"] == f"retry of trial {left.number}"
    assert RUNNING not in {t.state for t in after}
    assert WAITING not in {t.state for t in after}


def test_no_server_or_no_driver_is_one_line_within_seconds(tmp_path: Path) -> None:
    """Nothing on the port (refused at once), a port that takes the connection but never
    answers (the connect timeout the storage sets, shortened from 10 s to 2 s: the wait is
    all it would add), and psycopg not installed: each one `error:` line naming the problem,
    exit 1, no plan."""
    cli = "from autotune.cli.app import main\nsys.argv = ['autotune', *{argv!r}]\nmain()\n"
    no_driver = "import sys\nsys.modules['psycopg'] = None  # as if not installed\n" + cli
    short_wait = "import sys\nimport autotune.tuner.study as st\nst.CONNECT_TIMEOUT_S = 2\n" + cli
    with socket.socket() as closed, socket.socket() as silent:
        closed.bind(("127.0.0.1", 0))
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes the handshake; nobody ever answers
        ports = [closed.getsockname()[1], silent.getsockname()[1]]
        closed.close()
        urls = [f"postgresql://u@127.0.0.1:{p}/db" for p in ports]
        cases = {
            "refused": (_worker(tmp_path / "a", _argv(urls[0], 1)), "Connection refused"),
            "silent": (
                _worker(tmp_path / "b", [], short_wait.format(argv=_argv(urls[1], 1))),
                "timeout expired",
            ),
            "no driver": (
                _worker(tmp_path / "c", [], no_driver.format(argv=_argv(urls[0], 1))),
                "pip install 'ascend-autofusion[postgres]'",
            ),
        }
        for folder, (proc, phrase) in zip("abc", cases.values(), strict=True):
            _, err = proc.communicate(timeout=600)  # a hang fails here
            lines = err.strip().splitlines()
            assert proc.returncode == 1, err
            assert len(lines) == 1 and lines[0].startswith("error: "), err  # no traceback
            assert "'postgresql://...'" in lines[0] and phrase in lines[0], err
            assert not (tmp_path / folder / "p.json").exists()
