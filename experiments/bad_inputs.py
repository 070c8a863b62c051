"""Hostile input through every command that reads it (issue 23's report): the corpus of
``tests/reliability`` (built by code), each case run as the tests run it, counted per category
by outcome.

    cd experiments && ../.venv/bin/python bad_inputs.py      # -> results/bad_inputs.csv

Outcomes: ``accepted`` (exit 0, as expected), ``clear error`` (exit 1 with one error line
holding the expected phrase), ``usage error`` (exit 2, the CLI framework's), and the defects:
``traceback``, ``wrong outcome`` (another exit status or phrase), ``left output`` (a failure
that left a file behind) and ``input changed`` (a corpus file written over).
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from collections import Counter
from pathlib import Path

from _table import RESULTS, emit
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from cases import ALL, Case
from corpus import build

from autotune.cli import app


def _digest(path: Path) -> str:
    if not path.exists():
        return "dangling" if path.is_symlink() else "absent"
    return "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()


def outcome(case: Case, corpus: dict[str, Path], tmp: Path) -> str:
    names = {k: str(v) for k, v in corpus.items()}
    argv = [a.format(tmp=tmp, **names) for a in case.argv]
    before = {k: _digest(p) for k, p in corpus.items()}
    res = CliRunner().invoke(app, argv)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return "traceback"
    if any(_digest(p) != before[k] for k, p in corpus.items()):
        return "input changed"
    if res.exit_code != case.code:
        return "wrong outcome"
    if case.code == 1:
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        if len(errors) != 1 or case.says not in errors[0].lower():
            return "wrong outcome"
    if case.code and any(Path(o.format(tmp=tmp, **names)).exists() for o in case.outputs):
        return "left output"
    return {0: "accepted", 1: "clear error", 2: "usage error"}[case.code]


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        folder, work = Path(root) / "corpus", Path(root) / "plan"
        work.mkdir(parents=True)
        made = build(folder)
        res = CliRunner().invoke(
            app,
            ["tune", str(made["valid"]), "--trials", "2", "--cost", "analytic", "--polish", "0",
             "-o", str(work / "plan.json"), "--storage", str(work / "s.journal")],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        corpus = build(folder, work / "plan.json")
        counts: dict[str, Counter[str]] = {}
        bad = []
        for i, case in enumerate(ALL):
            tmp = Path(root) / f"case{i}"
            tmp.mkdir()
            got = outcome(case, corpus, tmp)
            counts.setdefault(case.category, Counter())[got] += 1
            if got not in ("accepted", "clear error", "usage error"):
                bad.append(f"{case.id}: {got}")
    cols = ("accepted", "clear error", "usage error", "traceback", "wrong outcome",
            "left output", "input changed")  # fmt: skip
    rows = [
        {"category": cat, "cases": sum(c.values()), **{k: c.get(k, 0) for k in cols}}
        for cat, c in counts.items()
    ]
    total = Counter[str]()
    for c in counts.values():
        total.update(c)
    rows.append(
        {"category": "all", "cases": sum(total.values()), **{k: total.get(k, 0) for k in cols}}
    )
    emit(rows, RESULTS / "bad_inputs.csv", width=13)
    print("\n".join(bad) if bad else "every case as expected")


if __name__ == "__main__":
    main()
