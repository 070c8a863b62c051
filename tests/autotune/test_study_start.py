"""How a study starts: resuming is said, ``--new`` starts a fresh one beside the old, and a
start that fails leaves no empty study behind (issue 46, item 8)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import optuna
import pytest
from quick_study import quick_config, run, small_graph, tune_args

from autotune.tuner import tune_graph


def _tune(folder: Path, *extra: str, out: str = "p.json"):
    return run(*tune_args(folder, out=out), *extra)


def _studies(folder: Path) -> dict[str, int]:
    """Every study in the folder's journal and how many trials it holds."""
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / "s.journal"))
    )
    return {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage)}


def test_a_run_says_which_study_it_opens_and_what_it_resumes(tmp_path: Path) -> None:
    first = _tune(tmp_path)
    assert first.exit_code == 0, first.stderr
    (name,) = [n for n in _studies(tmp_path) if not n.endswith(":measured")]
    assert f"new study '{name}' in {tmp_path / 's.journal'}" in first.stderr
    had = _studies(tmp_path)[name]
    again = _tune(tmp_path)
    assert again.exit_code == 0, again.stderr
    said = [ln for ln in again.stderr.splitlines() if ln.startswith("resuming")]
    assert len(said) == 1 and f"study '{name}'" in said[0], again.stderr
    complete = re.search(r": (\d+) of its (\d+) trials complete, best [\d.]+ us", said[0])
    assert complete and 2 <= int(complete[1]) <= int(complete[2]) == had, said[0]


def test_new_starts_a_fresh_study_and_keeps_the_old_one(tmp_path: Path) -> None:
    assert _tune(tmp_path).exit_code == 0
    (name,) = [n for n in _studies(tmp_path) if not n.endswith(":measured")]
    had = _studies(tmp_path)[name]
    fresh = _tune(tmp_path, "--new", out="q.json")
    assert fresh.exit_code == 0, fresh.stderr
    assert f"new study '{name}-2'" in fresh.stderr
    studies = _studies(tmp_path)
    assert studies[name] == had and studies[f"{name}-2"] == had  # the old one untouched
    # a name the user gives is never renamed: one line, exit 1, no plan written
    taken = _tune(tmp_path, "--new", "--study", name, out="r.json")
    assert taken.exit_code == 1 and not (tmp_path / "r.json").exists()
    lines = [ln for ln in taken.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"already has a study '{name}'" in lines[0]
    nothing = _tune(tmp_path, "--new", "--trials", "0", out="r.json")
    assert nothing.exit_code == 1 and "--new" in nothing.stderr


class _Stop(Exception):
    """What a failure in the middle of a run raises here."""


def _fail_at(phase: str):
    def told(now: str) -> None:
        if now == phase:
            raise _Stop(now)

    return told


@pytest.mark.parametrize("phase", ["trials", "pick"])
def test_a_failed_start_leaves_no_empty_study_behind(tmp_path: Path, phase: str) -> None:
    """A run that fails before any trial of the study it made completes (here as the trials
    or the pick begin: a KeyboardInterrupt or an error there) deletes that study again; one
    that fails on a study it resumed keeps it, trials and all."""
    graph, config = small_graph(), quick_config(tmp_path, trials=2)
    with pytest.raises(_Stop):
        tune_graph(graph, config, name="bert", on_phase=_fail_at("trials"))
    assert _studies(tmp_path) == {}
    tune_graph(graph, config, name="bert")
    before = _studies(tmp_path)
    with pytest.raises(_Stop):
        tune_graph(graph, config, name="bert", on_phase=_fail_at(phase))
    after = _studies(tmp_path)
    assert set(after) == set(before) and all(after[n] >= before[n] for n in before)


def test_the_python_api_says_it_through_logging(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    graph, config = small_graph(), quick_config(tmp_path, trials=1)
    with caplog.at_level(logging.INFO, logger="autotune"):
        tune_graph(graph, config, name="bert")
        tune_graph(graph, config, name="bert")
    said = [r.getMessage() for r in caplog.records if r.name.startswith("autotune")]
    assert any(m.startswith("new study 'bert-") for m in said), said
    assert any(m.startswith("resuming study 'bert-") for m in said), said
