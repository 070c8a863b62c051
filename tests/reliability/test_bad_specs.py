"""Bad spec input through the commands that read it (tests/reliability/cases.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_helpers import make_corpus, run_case
from cases import ALL, Case


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_corpus(tmp_path_factory)


@pytest.mark.parametrize("case", [c for c in ALL if c.category == "spec"], ids=lambda c: c.id)
def test_spec_input(case: Case, corpus: dict[str, Path], tmp_path: Path) -> None:
    run_case(case, corpus, tmp_path)
