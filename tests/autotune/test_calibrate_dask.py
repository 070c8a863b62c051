"""`autotune calibrate --dask`: the same table on a Dask cluster as in one process, a worker
killed mid-run loses no row, and a cluster that cannot be had is one error line."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pandas.testing import assert_frame_equal
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.costmodel import _sources
from costmodel.exceptions import MeasurementError
from costmodel.measure import read_table
from costmodel.measure.cluster import dask_executor
from costmodel.measure.sample import calibrate_tables
from costmodel.spec import load_target

distributed = pytest.importorskip("distributed")

SAMPLES = 48  # 12 tasks of four runs: enough in flight to kill a worker in the middle
MODEL = ["--models", "zoo:bert-base", "--samples", str(SAMPLES), "--seed", "0"]
runner = CliRunner()


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[distributed.LocalCluster, distributed.Client]]:
    """Two one-thread worker processes on loopback, and a client to watch them with."""
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as local,
        distributed.Client(local) as watcher,
    ):
        yield local, watcher


@pytest.fixture(scope="module")
def local_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The table of a plain one-process run, which every cluster run must reproduce."""
    out = tmp_path_factory.mktemp("local") / "t.parquet"
    res = runner.invoke(app, ["calibrate", *MODEL, "--jobs", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_a_local_cluster_writes_the_table_one_process_writes(
    local_table: Path, tmp_path: Path
) -> None:
    """Every column of every row, in order: the table carries no timestamp or command (the
    MANIFEST.json beside it does), so nothing is left out of the comparison."""
    out = tmp_path / "t.parquet"
    res = runner.invoke(
        app, ["calibrate", *MODEL, "--dask", "local", "--jobs", "2", "-o", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    frame = read_table(out)
    assert len(frame) == SAMPLES
    assert_frame_equal(frame, read_table(local_table))


def _calibrate_killing_a_worker(
    cluster: tuple[distributed.LocalCluster, distributed.Client], out: Path
) -> None:
    """Calibrate on the cluster; once the first results are in, SIGKILL a worker with tasks in
    flight (its nanny starts a new one)."""
    local, watcher = cluster
    watcher.wait_for_workers(2, timeout=600)  # a previous test's victim is back
    pids = watcher.run(os.getpid)  # worker address -> its process
    killed: list[int] = []

    def kill_a_busy_worker(_: int) -> None:
        if killed:
            return
        busy = {w: len(keys) for w, keys in watcher.processing().items() if keys}
        if busy:  # else the next result tries again
            victim = sorted(busy)[0]
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(busy[victim])

    try:
        with dask_executor(local.scheduler_address) as executor:
            calibrate_tables(
                _sources(["zoo:bert-base"], 0),
                load_target("ascend910b"),
                out,
                samples=SAMPLES,
                seed=0,
                executor=executor,
                progress=kill_a_busy_worker,
            )
    finally:
        assert killed and killed[0] >= 1  # a worker died with work on it


def test_a_worker_killed_mid_run_loses_no_row(
    cluster: tuple[distributed.LocalCluster, distributed.Client],
    local_table: Path,
    tmp_path: Path,
) -> None:
    """The scheduler reruns the dead worker's tasks elsewhere (the tasks are pure), and the
    table is still the one-process one."""
    out = tmp_path / "t.parquet"
    _calibrate_killing_a_worker(cluster, out)
    assert_frame_equal(read_table(out), read_table(local_table))


def test_a_cluster_that_gives_up_on_a_task_is_one_error(
    cluster: tuple[distributed.LocalCluster, distributed.Client], tmp_path: Path
) -> None:
    """With no worker death allowed per task, the kill fails the run: a MeasurementError (one
    line in the CLI), and no table. This also shows the kill hits tasks in flight."""
    scheduler = cluster[0].scheduler
    assert scheduler is not None
    allowed, scheduler.allowed_failures = scheduler.allowed_failures, 0
    try:
        with pytest.raises(MeasurementError, match="lost every worker that ran a task"):
            _calibrate_killing_a_worker(cluster, tmp_path / "t.parquet")
    finally:
        scheduler.allowed_failures = allowed
    assert not list(tmp_path.iterdir())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_is_one_line_after_the_timeout(tmp_path: Path) -> None:
    address = f"tcp://127.0.0.1:{_closed_port()}"
    res = runner.invoke(
        app,
        ["calibrate", *MODEL, "--dask", address, "--dask-timeout", "2",
         "-o", str(tmp_path / "t.parquet")],
        catch_exceptions=False,
    )  # fmt: skip
    assert res.exit_code == 1
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"error: cannot connect to a Dask scheduler at '{address}'")
    assert "after 2 s" in line  # Dask's own words: the timeout given was the one used
    assert not list(tmp_path.iterdir())


def test_without_the_extra_dask_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A None in sys.modules makes the import fail as a missing package does."""
    monkeypatch.setitem(sys.modules, "distributed", None)
    res = runner.invoke(
        app,
        ["calibrate", *MODEL, "--dask", "local", "-o", str(tmp_path / "t.parquet")],
        catch_exceptions=False,
    )
    assert res.exit_code == 1
    (line,) = res.output.strip().splitlines()
    assert "pip install 'ascend-autofusion[dask]'" in line and line.startswith("error: ")
    assert not list(tmp_path.iterdir())
