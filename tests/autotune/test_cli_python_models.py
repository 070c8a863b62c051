"""MODEL ``python:package.module:factory`` on the command line: every command reads a PyTorch
module a function returns (with its example inputs), exported once per command; a spec that
does not resolve is one line and exit status 1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch_models as tm
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.common import python_source

runner = CliRunner()
VIT = "python:torch_models:make_vit_block"


@pytest.fixture(autouse=True)
def _fresh_exports() -> None:
    python_source.cache_clear()


def _run(*args: str):
    return runner.invoke(app, list(args))


def test_inspect_tune_codegen_and_run_take_a_python_model(tmp_path: Path) -> None:
    res = _run("inspect", VIT, "--json")
    assert res.exit_code == 0, res.output
    assert "LayerNormalization" in res.stdout
    plan = tmp_path / "plan.json"
    res = _run("tune", VIT, "--trials", "3", "--cost", "analytic", "--precision", "fp32",
               "--codegen-check", "off", "-o", str(plan),
               "--storage", str(tmp_path / "s.journal"))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(plan.read_text())["groups"]
    pkg = tmp_path / "pkg"
    assert _run("codegen", VIT, str(plan), "-o", str(pkg)).exit_code == 0
    module, (x,) = tm.make_vit_block()
    np.savez(tmp_path / "x.npz", x=x.numpy())
    res = _run("run", VIT, str(plan), "--inputs", str(tmp_path / "x.npz"),
               "-o", str(tmp_path / "y.npz"))  # fmt: skip
    assert res.exit_code == 0, res.output
    with np.load(tmp_path / "y.npz") as got, torch.no_grad():
        (y,) = got.values()
        want = module(x).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("python:torch_models", "is not python:package.module:factory"),
        ("python:no_such_module:make", "cannot import 'no_such_module'"),
        ("python:torch_models:make_nothing", "has no function 'make_nothing'"),
        ("python:torch_models:rotate_half", "calling torch_models:rotate_half() failed"),
    ],
)
def test_a_python_model_that_does_not_resolve_is_one_line(spec: str, says: str) -> None:
    res = _run("inspect", spec)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 1 and len(lines) == 1 and "Traceback" not in res.output
    assert says in lines[0]
