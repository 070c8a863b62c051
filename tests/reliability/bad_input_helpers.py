"""The bad-input corpus (each test module builds its own: ``make_corpus``) and the runner
every case goes through."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from cases import Case
from corpus import build
from typer.testing import CliRunner

from autotune.cli import app


def make_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every corpus file, and a valid plan of the valid model made by the tool itself."""
    folder = tmp_path_factory.mktemp("corpus")
    made = build(folder)
    work = tmp_path_factory.mktemp("plan")
    res = CliRunner().invoke(
        app,
        ["tune", str(made["valid"]), "--trials", "2", "--cost", "analytic", "--polish", "0",
         "-o", str(work / "plan.json"), "--storage", str(work / "s.journal")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return build(folder, work / "plan.json")


def _digest(path: Path) -> str:
    if path.is_symlink() and not path.exists():
        return "dangling"
    if not path.exists():
        return "absent"
    if path.is_dir():
        return "dir:" + ",".join(sorted(p.name for p in path.iterdir()))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_case(case: Case, corpus: dict[str, Path], tmp: Path) -> None:
    """Run one case in-process and hold it to its expected outcome: the exit status, one
    error line with its phrase and no traceback, no corpus file changed, and no output left
    behind by a failure."""
    names = {k: str(v) for k, v in corpus.items()}
    argv = [a.format(tmp=tmp, **names) for a in case.argv]
    before = {k: _digest(p) for k, p in corpus.items()}
    res = CliRunner().invoke(app, argv)
    where = f"{case.id}: autotune {' '.join(argv)}\n{res.output}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"{where}\nraised {type(res.exception).__name__}") from res.exception
    assert "Traceback" not in res.output, where
    assert res.exit_code == case.code, where
    if case.code == 1:
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, where
        assert case.says in errors[0].lower(), where
    if case.code != 0:
        for out in case.outputs:
            assert not Path(out.format(tmp=tmp, **names)).exists(), where
    after = {k: _digest(p) for k, p in corpus.items()}
    changed = sorted(k for k in before if before[k] != after[k])
    assert not changed, f"{where}\ncorpus files changed: {changed}"
    shutil.rmtree(tmp, ignore_errors=True)
