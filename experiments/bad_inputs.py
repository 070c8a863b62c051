"""Hostile input through every command that reads it (issue 23's report), and outputs that
would destroy a file, full disks, read-only folders and hostile names (issue 47): the corpus
of ``tests/reliability`` (built by code), each case run as the tests run it, counted per
category by outcome.

    cd experiments && ../.venv/bin/python bad_inputs.py      # -> results/bad_inputs.csv

Totals, as issue 47 asks: ``ok`` (exit 0 where accepted, 1 with one error line holding the
expected phrase, 2 for a usage error), ``traceback``, ``accepted-bad`` (another exit status or
phrase, e.g. an output that should have been refused; a failure that left a file or a write
that left its temporary; a raw control character on the terminal), ``data-loss`` (a corpus
file, hashed before and after every run, or a file the case had to keep, not whole), ``hang``
(still running when the per-run guard, ``LIMIT_S``, expired). The finer outcomes of
``bad_input_helpers.CLASSES`` are listed per case when they are not ok. Cases on a small
tmpfs need root; elsewhere they count as ``skipped``. A case sent Ctrl-C is ok when it
exits 130 with the one line ``interrupted``.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

from _table import RESULTS, emit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from bad_input_helpers import CLASSES, build_corpus, outcome
from cases import ALL

LIMIT_S = 300.0  # a run longer than this is a hang (the slowest case takes seconds)
COLUMNS = ("ok", "traceback", "accepted-bad", "data-loss", "hang")


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
            got, where = outcome(case, corpus, tmp, limit_s=LIMIT_S)
            counts.setdefault(case.category, Counter())[CLASSES[got]] += 1
            if CLASSES[got] == "skipped":
                skipped.append(f"skipped {where.splitlines()[-1]}")
            elif CLASSES[got] != "ok":
                bad.append(f"{case.id}: {got}")
    total = Counter[str]()
    for c in counts.values():
        total.update(c)
    cols = COLUMNS + (("skipped",) if total["skipped"] else ())
    rows = [
        {"category": cat, "cases": sum(c.values()), **{k: c.get(k, 0) for k in cols}}
        for cat, c in [*counts.items(), ("all", total)]
    ]
    emit(rows, RESULTS / "bad_inputs.csv", width=12)
    print("\n".join([*skipped, *(bad or ["every case as expected"])]))


if __name__ == "__main__":
    main()
