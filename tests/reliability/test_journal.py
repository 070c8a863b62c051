"""A journal damaged by a crash: a cut-off last line is mended and the study resumes from the
lines before it, saying so; damage before the last line is one clear error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import optuna
import pytest
from corpus import valid_model
from typer.testing import CliRunner

from autotune.cli import app


def _tune(tmp: Path, trials: int, out: str) -> object:
    args = [
        "tune",
        str(tmp / "m.onnx"),
        "--trials",
        str(trials),
        "--cost",
        "analytic",
        "--polish",
        "0",
        "-o",
        str(tmp / out),
        "--storage",
        str(tmp / "s.journal"),
    ]
    return CliRunner().invoke(app, args)


def _trials(tmp: Path) -> int:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp / "s.journal"))
    )
    (summary,) = [
        s
        for s in optuna.get_all_study_summaries(storage)
        if not s.study_name.endswith(":measured")
    ]
    return summary.n_trials


@pytest.fixture
def study(tmp_path: Path) -> Path:
    (tmp_path / "m.onnx").write_bytes(valid_model().SerializeToString())
    res = _tune(tmp_path, 3, "p.json")
    assert res.exit_code == 0, res.output
    return tmp_path


def test_a_cut_off_last_line_is_mended_and_the_study_resumes(
    study: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = study / "s.journal"
    before = _trials(study)
    data = journal.read_bytes()
    journal.write_bytes(data[:-15])  # a writer killed mid-line
    res = _tune(study, 2, "p2.json")
    assert res.exit_code == 0, res.output
    said = caplog.text  # the warning, as the CLI prints it on stderr
    assert "last line was cut off" in said and "s.journal.damaged" in said
    assert (study / "s.journal.damaged").read_bytes() == data[:-15]  # kept as it was
    assert _trials(study) >= before + 2 - 1  # at most the trial of the cut line is lost
    assert (study / "p2.json").exists()


def test_damage_before_the_last_line_is_one_clear_error(study: Path) -> None:
    journal = study / "s.journal"
    lines = journal.read_bytes().split(b"\n")
    lines[2] = b"{not json"
    journal.write_bytes(b"\n".join(lines))
    digest = hashlib.sha256(journal.read_bytes()).hexdigest()
    res = _tune(study, 1, "p2.json")
    assert (res.exit_code == 1 and res.exception is None) or isinstance(res.exception, SystemExit)
    assert res.exit_code == 1
    assert "line 3 of" in res.stderr and "cannot be resumed" in res.stderr
    assert not (study / "p2.json").exists()
    assert hashlib.sha256(journal.read_bytes()).hexdigest() == digest  # left as it was


def test_a_whole_last_record_without_its_newline_is_kept(
    study: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = study / "s.journal"
    before = _trials(study)
    journal.write_bytes(journal.read_bytes().rstrip(b"\n"))
    res = _tune(study, 1, "p2.json")
    assert res.exit_code == 0, res.output
    assert "cut off" not in caplog.text and not (study / "s.journal.damaged").exists()
    assert _trials(study) == before + 1
