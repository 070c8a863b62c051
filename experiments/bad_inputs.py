"""Hostile input through every command that reads it (issue 23's report): the corpus of
``tests/reliability`` (built by code), each case run as the tests run it, counted per category
by outcome.

    cd experiments && ../.venv/bin/python bad_inputs.py      # -> results/bad_inputs.csv

Outcomes: ``accepted`` (exit 0, as expected), ``clear error`` (exit 1 with one error line
holding the expected phrase), ``usage error`` (exit 2, the CLI framework's), ``interrupted``
(Ctrl-C: exit 130 and the one line ``interrupted``), ``skipped`` (a corpus file this machine
cannot make: a read-only mount needs root), and the defects:
``traceback``, ``wrong outcome`` (another exit status or phrase), ``left output`` (a failure
that left a file behind) and ``input changed`` (a corpus file written over).
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

from _table import RESULTS, emit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from bad_input_helpers import EXPECTED, build_corpus, outcome
from cases import ALL


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        work = Path(root) / "plan"
        work.mkdir(parents=True)
        corpus = build_corpus(Path(root) / "corpus", work)
        counts: dict[str, Counter[str]] = {}
        bad: list[str] = []
        skipped: list[str] = []
        for i, case in enumerate(ALL):
            tmp = Path(root) / f"case{i}"
            tmp.mkdir()
            got, where = outcome(case, corpus, tmp)
            counts.setdefault(case.category, Counter())[got] += 1
            if got == "skipped":
                skipped.append(f"skipped {where}")
            elif got not in EXPECTED.values():
                bad.append(f"{case.id}: {got}")
    cols = ("accepted", "clear error", "usage error", "interrupted", "skipped", "traceback",
            "wrong outcome", "left output", "input changed")  # fmt: skip
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
    print("\n".join([*skipped, *bad]) if bad else "\n".join([*skipped, "every case as expected"]))


if __name__ == "__main__":
    main()
