"""Progress wherever a user waits (issue 46, item 2): on a terminal a bar that stays, with its
phase and ETA; in a log, under CI and from Python, a line per phase and every few units."""

from __future__ import annotations

import itertools
import json
import logging
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from quick_study import FAST, MODEL, quick_config, run, small_graph, tune_args

from autotune.progress import LOGGER, Counter, every
from autotune.tuner import tune_graph

TUNE = ("tune", *MODEL, "--trials", "6", *FAST)  # in the folder a test runs it in


@given(total=st.integers(1, 500), chunks=st.lists(st.integers(1, 40), min_size=1))
def test_a_count_is_told_about_ten_times_and_always_at_its_end(
    total: int, chunks: list[int]
) -> None:
    told: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: told.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    try:
        counter, done = Counter("kernels", total), 0
        for n in chunks:
            n = min(n, total - done)
            if n <= 0:
                break
            counter.advance(n)
            done += n
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    counts = [int(re.match(r"kernels (\d+)/", line)[1]) for line in told]
    assert counts == sorted(counts) and len(counts) <= total // every(total) + 1
    assert all(b - a >= every(total) for a, b in itertools.pairwise(counts) if b < total)
    if done == total:
        assert counts[-1] == total


def test_tune_in_a_log_says_each_phase_and_every_few_trials(tmp_path: Path) -> None:
    res = run(*tune_args(tmp_path, trials=6))
    assert res.exit_code == 0, res.stderr
    lines = res.stderr.splitlines()
    phases = [ln.removeprefix("phase: ").split(" (")[0] for ln in lines if ln.startswith("phase:")]
    assert phases[0] == "trials" and "pick" in phases and phases[-1] == "report"
    first = {
        kind: next(i for i, ln in enumerate(lines) if ln.startswith(kind))
        for kind in ("new study", "phase: trials")
    }
    assert first["new study"] < first["phase: trials"]  # the study is named first
    assert len(phases) == len(set(phases))  # a phase is told once, however often entered
    trials = [ln for ln in lines if ln.startswith("trials ")]
    assert trials and trials[-1].startswith("trials 6/6, best predicted ")


def test_the_python_api_tells_its_progress_through_logging(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    graph, config = small_graph(), quick_config(tmp_path, trials=4)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        tune_graph(graph, config, name="bert")
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "phase: trials" in " ".join(said) and any(m.startswith("trials 4/4") for m in said)


def test_verify_in_a_log_counts_the_kernels_it_checks(tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    assert run(*tune_args(tmp_path, trials=6, out=plan.name)).exit_code == 0
    res = run("verify", *MODEL, str(plan), "--json")
    assert res.exit_code == 0, res.stderr
    kernels = len(json.loads(res.stdout)["kernels"])
    counts = re.findall(r"^kernels checked (\d+)/(\d+)", res.stderr, re.M)
    assert counts and counts[-1] == (str(kernels), str(kernels)), res.stderr
    assert "phase: each fused kernel" in res.stderr


def test_on_a_terminal_the_bar_stays_with_its_phase_and_eta(tmp_path: Path) -> None:
    """In a pseudo-terminal, as a user runs it: the bar's last state (phase ``done``, the
    trial count, an ETA column) is still on the screen after the run, and no progress line
    is printed beside it."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", *TUNE, "--storage", "s.journal", "-o", "p.json"],
        cwd=tmp_path,
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, "COLUMNS": "200", "TERM": "xterm"},
    )
    os.close(child)
    screen = b""
    while True:
        ready, _, _ = select.select([main], [], [], 600)  # a hang guard
        if not ready:
            break
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    assert proc.wait(timeout=600) == 0, screen.decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode(errors="replace"))
    last = [ln for ln in re.split(r"[\r\n]", text) if "tuning" in ln][-1]
    assert "done" in last and "6/6 trials" in last and "eta" in last, last
    assert "phase: trials" not in text and not re.search(r"^trials \d+/", text, re.M)
