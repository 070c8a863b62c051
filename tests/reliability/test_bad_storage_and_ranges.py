"""Damaged storage and out-of-range values through the commands that read them (issue 47:
tests/reliability/cases_input.py): journals that are no Optuna journal, a read-only folder,
values out of range, files nested thousands of levels deep, Ctrl-C as a real process starts,
and a Dask scheduler that is none."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_helpers import make_corpus, run_case
from cases import ALL, Case
from cases_input import CATEGORIES


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_corpus(tmp_path_factory)


@pytest.mark.parametrize("case", [c for c in ALL if c.category in CATEGORIES], ids=lambda c: c.id)
def test_storage_and_range_input(case: Case, corpus: dict[str, Path], tmp_path: Path) -> None:
    run_case(case, corpus, tmp_path)
