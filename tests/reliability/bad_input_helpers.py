"""The bad-input corpus (each test module builds its own: ``make_corpus``) and the runner
every case goes through."""

from __future__ import annotations

import hashlib
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from cases import Case
from corpus import build
from input_runs import Ran, invoke, unavailable
from output_helpers import broken_files, digests, prepared, raw_controls, temp_files
from typer.testing import CliRunner

from autotune.cli import app


def build_corpus(folder: Path, work: Path) -> dict[str, Path]:
    """Every corpus file in ``folder``, and a valid plan of the valid model made by the tool
    itself in ``work`` (the plan variants are made from it)."""
    made = build(folder)
    res = CliRunner().invoke(
        app,
        ["tune", str(made["valid"]), "--trials", "2", "--cost", "analytic", "--polish", "0",
         "-o", str(work / "plan.json"), "--storage", str(work / "s.journal")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return build(folder, work / "plan.json")


def make_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The corpus in a test's temporary folders."""
    return build_corpus(tmp_path_factory.mktemp("corpus"), tmp_path_factory.mktemp("plan"))


def _digest(path: Path) -> str:
    if path.is_symlink() and not path.exists():
        return "dangling"
    if not path.exists():
        return "absent"
    if path.is_dir():
        return "dir:" + ",".join(sorted(p.name for p in path.iterdir()))
    if not path.is_file():  # a device or a pipe: never read it (/dev/full reads forever)
        st = path.stat()
        return f"special:{st.st_mode:o}:{st.st_rdev}"
    return hashlib.sha256(path.read_bytes()).hexdigest()


# outcome by exit status; 130: Ctrl-C, the one line `interrupted`
EXPECTED = {0: "accepted", 1: "clear error", 2: "usage error", 130: "interrupted"}
# each outcome in the totals the issue asks for (experiments/bad_inputs.py)
CLASSES = {
    "accepted": "ok",
    "clear error": "ok",
    "usage error": "ok",
    "interrupted": "ok",
    "traceback": "traceback",
    "wrong outcome": "accepted-bad",  # another exit status or phrase (a refusal missed...)
    "left output": "accepted-bad",  # a failure left a file, or a write its temporary file
    "raw control": "accepted-bad",  # a control character reached the terminal
    "input changed": "data-loss",  # a corpus file, or a file the case had to keep, not whole
    "hang": "hang",  # still running when the guard expired
    "skipped": "skipped",  # cannot run here (a tmpfs or a read-only mount needs root)
}


class Hang(BaseException):
    """The per-run guard expired (not an ``Exception``: nothing in the tool catches it)."""


def _invoke(case: Case, argv: list[str], tmp: Path, limit_s: float | None) -> Ran:
    """Run ``argv`` as ``case`` says (:func:`input_runs.invoke`: in-process, or a real
    process sent Ctrl-C); with ``limit_s``, raise :class:`Hang` in it when it runs longer
    (SIGALRM: a loop or a blocking call in Python is interrupted)."""
    if limit_s is None:
        return invoke(case, argv, tmp)

    def expire(signum: int, frame: Any) -> None:
        raise Hang()

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        return invoke(case, argv, tmp)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def outcome(
    case: Case, corpus: dict[str, Path], tmp: Path, limit_s: float | None = None
) -> tuple[str, str]:
    """Run one case in-process: its outcome (``EXPECTED`` of its exit status when it behaved,
    else one of the defects of :data:`CLASSES`) and the command with what it printed."""
    why = unavailable(case)
    if why is not None:
        return "skipped", f"{case.id}: {why}"
    names = {k: str(v) for k, v in corpus.items()}
    argv = [a.format(tmp=tmp, **names) for a in case.argv]
    where = f"{case.id}: autotune {' '.join(argv)!r}"
    with prepared(case, corpus, tmp) as cannot:
        if cannot:
            return "skipped", f"{where}\n{cannot}"
        before = {k: _digest(p) for k, p in corpus.items()}
        kept = digests(case, tmp)
        try:
            res = _invoke(case, argv, tmp, limit_s)
        except Hang:
            return "hang", f"{where}\nstill running after {limit_s} s"
        where = f"{where}\n{res.output}"
        changed = sorted(k for k, p in corpus.items() if _digest(p) != before[k])
        changed += broken_files(case, tmp, kept)
        left = temp_files(tmp)
    if (
        res.exception is not None and not isinstance(res.exception, SystemExit)
    ) or "Traceback" in res.output:
        return "traceback", f"{where}\nraised {res.exception!r}"
    if changed:
        return "input changed", f"{where}\nfiles not whole: {changed}"
    if raw_controls(res.output):
        return "raw control", f"{where}\nraw: {raw_controls(res.output)}"
    if res.exit_code != case.code:
        return "wrong outcome", where
    if case.code == 1:
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        if len(errors) != 1 or case.says not in errors[0].lower():
            return "wrong outcome", where
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    if case.code == 130 and lines != ["interrupted"]:
        return "wrong outcome", where
    if left or (
        case.code and any(Path(o.format(tmp=tmp, **names)).exists() for o in case.outputs)
    ):
        return "left output", f"{where}\n{left}"
    return EXPECTED[case.code], where


def run_case(case: Case, corpus: dict[str, Path], tmp: Path) -> None:
    """Hold one case to its expected outcome: the exit status, one error line with its phrase
    and no traceback, no corpus file changed, and no output left behind by a failure."""
    got, where = outcome(case, corpus, tmp)
    if got == "skipped":
        pytest.skip(where.splitlines()[-1])
    assert got == EXPECTED[case.code], f"{got}: {where}"
    shutil.rmtree(tmp, ignore_errors=True)
