"""Hostile and odd ONNX files through every command that reads a model (cases.MODELS)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from bad_input_helpers import make_corpus, run_case
from cases import ALL, MODELS, Case
from typer.testing import CliRunner

from autotune.cli import app


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_corpus(tmp_path_factory)


@pytest.mark.parametrize("case", [c for c in ALL if c.category == "model"], ids=lambda c: c.id)
def test_model_input(case: Case, corpus: dict[str, Path], tmp_path: Path) -> None:
    run_case(case, corpus, tmp_path)


ODD = [m for m, (code, _) in MODELS.items() if code == 0 and m not in ("valid", "huge_dims")]


@pytest.mark.parametrize("name", ODD)
def test_legal_but_odd_models_tune_apply_and_verify(
    name: str, corpus: dict[str, Path], tmp_path: Path
) -> None:
    """An accepted odd model goes the whole way: its plan applies, and the fused model equals
    the original in onnxruntime (``verify`` exits 0 only then)."""
    model, plan, fused = str(corpus[name]), str(tmp_path / "p.json"), str(tmp_path / "f.onnx")
    runner = CliRunner()
    steps = [
        ["tune", model, "--trials", "2", "--cost", "analytic", "--polish", "0", "-o", plan,
         "--storage", str(tmp_path / "s.journal")],
        ["apply", model, plan, "-o", fused],
        ["verify", model, plan, "--json"],
    ]  # fmt: skip
    for argv in steps:
        res = runner.invoke(app, argv)
        assert res.exception is None or isinstance(res.exception, SystemExit), res.output
        if argv[0] == "verify" and name == "unknown_domain":
            # onnxruntime has no kernel for com.example:Swish: the graph check cannot run, and
            # says so in one line (the plan and the fused model were still written)
            assert res.exit_code == 1 and "onnxruntime cannot run" in res.stderr, res.output
            break
        assert res.exit_code == 0, f"{argv[0]}: {res.output}"
    else:
        assert json.loads(res.stdout)["ok"] is True
    fused_model = onnx.load(fused)
    onnx.checker.check_model(fused_model)  # a real model was written
    names = [n.name for n in fused_model.graph.node]
    assert len(names) == len(set(names)) and all(names)


def test_a_model_with_an_empty_tensor_does_no_work(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    """x[0, 64]: nothing runs, so nothing costs anything and nothing is fused or searched."""
    model = str(corpus["zero_dim"])
    runner = CliRunner()
    est = json.loads(runner.invoke(app, ["estimate", model, "--json"]).stdout)
    assert est["latency"]["us"] == 0 and est["n_kernels"] == 0 and est["kernels"] == []
    cand = json.loads(runner.invoke(app, ["candidates", model, "--json"]).stdout)
    assert cand["candidates"] == []
    plan = tmp_path / "p.json"
    res = runner.invoke(
        app, ["tune", model, "-o", str(plan), "--storage", str(tmp_path / "s.journal"), "--json"]
    )
    assert res.exit_code == 0 and json.loads(res.stdout)["simulated_us"] == 0
    assert all(len(g["ops"]) == 1 for g in json.loads(plan.read_text())["groups"])
    assert not (tmp_path / "s.journal").exists()  # no study was opened
