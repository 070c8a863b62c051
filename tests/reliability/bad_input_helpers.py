"""The bad-input corpus (each test module builds its own: ``make_corpus``) and the runner
every case goes through."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from cases import Case
from corpus import build
from input_runs import invoke, unavailable
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
    return hashlib.sha256(path.read_bytes()).hexdigest()


# outcome by exit status; 130: Ctrl-C, the one line `interrupted`
EXPECTED = {0: "accepted", 1: "clear error", 2: "usage error", 130: "interrupted"}


def outcome(case: Case, corpus: dict[str, Path], tmp: Path) -> tuple[str, str]:
    """Run one case in-process: its outcome (``EXPECTED`` of its exit status when it behaved,
    else ``traceback``, ``input changed``, ``wrong outcome`` or ``left output``; or
    ``skipped``: a corpus file it needs cannot be made here) and the command with what it
    printed (or why it was skipped)."""
    why = unavailable(case)
    if why is not None:
        return "skipped", f"{case.id}: {why}"
    names = {k: str(v) for k, v in corpus.items()}
    argv = [a.format(tmp=tmp, **names) for a in case.argv]
    before = {k: _digest(p) for k, p in corpus.items()}
    res = invoke(case, argv, tmp)
    where = f"{case.id}: autotune {' '.join(argv)}\n{res.output}"
    if (
        res.exception is not None and not isinstance(res.exception, SystemExit)
    ) or "Traceback" in res.output:
        return "traceback", f"{where}\nraised {res.exception!r}"
    changed = sorted(k for k, p in corpus.items() if _digest(p) != before[k])
    if changed:
        return "input changed", f"{where}\ncorpus files changed: {changed}"
    if res.exit_code != case.code:
        return "wrong outcome", where
    if case.code == 1:
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        if len(errors) != 1 or case.says not in errors[0].lower():
            return "wrong outcome", where
    if case.code == 130 and [ln for ln in res.stderr.splitlines() if ln.strip()] != [
        "interrupted"
    ]:
        return "wrong outcome", where
    if case.code and any(Path(o.format(tmp=tmp, **names)).exists() for o in case.outputs):
        return "left output", where
    return EXPECTED[case.code], where


def run_case(case: Case, corpus: dict[str, Path], tmp: Path) -> None:
    """Hold one case to its expected outcome: the exit status, one error line with its phrase
    and no traceback, no corpus file changed, and no output left behind by a failure."""
    got, where = outcome(case, corpus, tmp)
    if got == "skipped":
        pytest.skip(where)
    assert got == EXPECTED[case.code], f"{got}: {where}"
    shutil.rmtree(tmp, ignore_errors=True)
