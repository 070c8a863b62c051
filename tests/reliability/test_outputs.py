"""Outputs that would destroy a file, writes to a device, a full disk or a read-only folder,
and hostile names (issue 47; the cases of tests/reliability/cases_output.py), then what the
case table cannot say: the default storage of the working folder, and a hostile model's whole
way through the tool with its HTML pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bad_input_helpers import make_corpus, run_case
from cases import ALL, Case
from corpus_output import EVIL, MARKUP
from output_helpers import raw_controls
from typer.testing import CliRunner

from autotune.cli import app
from autotune.safe_text import html_text, printable
from search_space.file_kind import file_kind

CATEGORIES = ("output", "disk", "names")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_corpus(tmp_path_factory)


@pytest.mark.parametrize("case", [c for c in ALL if c.category in CATEGORIES], ids=lambda c: c.id)
def test_output_case(case: Case, corpus: dict[str, Path], tmp_path: Path) -> None:
    run_case(case, corpus, tmp_path)


def test_the_default_storage_is_never_written_over(
    corpus: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """./autotune.journal, the storage tune opens when given none: no other output replaces
    it, with or without --storage."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    tune = ["tune", str(corpus["valid"]), "--trials", "1", "--cost", "analytic", "--polish", "0"]
    assert runner.invoke(app, [*tune, "-o", "plan.json"]).exit_code == 0
    journal = tmp_path / "autotune.journal"
    before = journal.read_bytes()
    for argv in (
        ["report", "plan.json", "--html", "autotune.journal"],
        ["apply", str(corpus["valid"]), "plan.json", "-o", "autotune.journal"],
        [*tune, "-o", "autotune.journal"],
        ["zoo", "export", "transformer-base", "--scale", "0.1", "-o", "autotune.journal"],
    ):
        res = runner.invoke(app, argv)
        assert res.exit_code == 1, res.output
        lines = res.stderr.splitlines()
        assert len(lines) == 1 and "autotune.journal" in lines[0], res.output
        assert "study's storage" in lines[0] or "optuna journal" in lines[0].lower()
    assert journal.read_bytes() == before


def test_a_hostile_model_goes_the_whole_way_escaped(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    """Every command on a model whose file, op and tensor names carry escape sequences and
    markup: nothing raw reaches stdout or stderr, and the HTML pages escape the names."""
    m = str(corpus["hostile"])
    plan, fused = str(tmp_path / f"p{EVIL}.json"), str(tmp_path / f"f{EVIL}.onnx")
    pages = [tmp_path / f"r{EVIL}.html", tmp_path / f"c{EVIL}.html"]
    steps = [
        [
            "tune",
            m,
            "--trials",
            "3",
            "--cost",
            "analytic",
            "--polish",
            "0",
            "-o",
            plan,
            "--storage",
            str(tmp_path / f"s{EVIL}.journal"),
        ],
        ["report", plan],
        ["report", plan, "--html", str(pages[0]), "--plotly", "cdn"],
        ["candidates", m, "--html", str(pages[1])],
        ["estimate", m, "--plan", plan, "--cost", "analytic"],
        ["apply", m, plan, "-o", fused],
        ["verify", m, plan],
        ["inspect", fused, "--ops"],
    ]
    runner = CliRunner()
    for argv in steps:
        res = runner.invoke(app, argv)
        assert res.exit_code == 0, f"{argv[0]}: {res.output}"
        assert not raw_controls(res.output), f"{argv[0]}: {res.output!r}"
        assert "\\x1b]0;pwned\\x07" in res.output or argv[0] == "inspect"
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not raw_controls(text.replace("\r", "")), page.name
        assert MARKUP not in text and "<script>alert" not in text
        assert "mm\\u001b]0;pwned" in text  # the names are there, escaped


def test_names_are_printed_escaped() -> None:
    assert printable("a\x1b[2Jb\x07\x9b\udc9bc") == "a\\x1b[2Jb\\x07\\x9b\\x9bc"
    assert printable("one\ntwo\tx") == "one\ntwo\tx"
    assert printable("one\ntwo", one_line=True) == "one\\ntwo"
    assert html_text("<b>\x1b") == "&lt;b&gt;\\x1b"


def test_file_kinds_are_told_by_content(corpus: dict[str, Path], tmp_path: Path) -> None:
    """A file's kind comes from its bytes, whatever its name says."""
    for name, kind in {
        "valid": "onnx",
        "fused_model": "tool_onnx",
        "journal": "journal",
        "plan_valid": "plan",
        "parquet": "parquet",
        "html_page": "html",
        "config_toml": "toml",
        "text_file": "text",
        "random": "data",
        "empty": None,
        "full_device": None,
    }.items():
        renamed = tmp_path / f"{name}.bin"
        if corpus[name].is_file():
            renamed.write_bytes(corpus[name].read_bytes())
            assert file_kind(renamed) == kind, name
        assert file_kind(corpus[name]) == kind, name
    exports = Path(__file__).parents[1] / "fixtures" / "exports"
    for model in sorted(exports.glob("*.onnx")):  # torch's exports
        assert file_kind(model) == "onnx", model.name
    assert re.fullmatch(r"[a-z_]+", str(file_kind(corpus["valid"])))
