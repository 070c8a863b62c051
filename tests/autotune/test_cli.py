"""The CLI as a user meets it: JSON shapes, tables, one-line errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from conftest import exporter_attention
from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))


def test_inspect_json_on_a_small_zoo_model() -> None:
    res = _run("inspect", "zoo:bert-base", "--scale", "0.1", "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    for key in (
        "model",
        "fingerprint",
        "ops",
        "op_types",
        "op_classes",
        "flops",
        "bytes_min",
        "tensors",
        "dynamic_tensors",
    ):
        assert key in s, key
    assert s["dynamic_tensors"] == [] and s["ops"] == sum(s["op_types"].values())
    assert "Constant" not in s["op_types"] and s["flops"] > 0


def test_inspect_table_and_per_op_listing(tmp_path: Path) -> None:
    path = tmp_path / "att.onnx"
    onnx.save_model(exporter_attention(), str(path))
    res = _run("inspect", str(path), "--input-shape", "x=2x8x16", "--ops")
    assert res.exit_code == 0, res.output
    assert "MatMul" in res.stdout and "q_proj" in res.stdout and "fingerprint" in res.stdout


def test_dynamic_input_without_flag_is_one_line_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "att.onnx"
    onnx.save_model(exporter_attention(), str(path))
    res = _run("inspect", str(path))
    assert res.exit_code == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--input-shape x=" in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["inspect", "nowhere.onnx"], "not found"),
        (["inspect", "zoo:alexnet"], "unknown zoo model 'alexnet'"),
        (["inspect", "zoo:bert-base", "--input-shape", "bad"], "NAME=DIMxDIM"),
    ],
)
def test_user_errors_exit_1_with_one_line(args: list[str], needle: str) -> None:
    res = _run(*args)
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], res.stderr


def test_usage_error_exits_2() -> None:
    assert _run("inspect").exit_code == 2
    assert _run("inspect", "x.onnx", "--no-such-flag").exit_code == 2


def test_zoo_list_json_names_every_model() -> None:
    res = _run("zoo", "list", "--json")
    assert res.exit_code == 0
    names = {m["name"] for m in json.loads(res.stdout)}
    assert names == {
        "resnet50",
        "bert-base",
        "transformer-base",
        "gpt2",
        "llama3-8b",
        "mobilenetv3",
        "vit-b16",
    }


def test_zoo_export_writes_a_loadable_file(tmp_path: Path) -> None:
    out = tmp_path / "gpt2.onnx"
    res = _run("zoo", "export", "gpt2", "--scale", "0.1", "-o", str(out))
    assert res.exit_code == 0, res.output
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    again = _run("inspect", str(out), "--json")
    assert json.loads(again.stdout)["dynamic_tensors"] == []


def test_failed_export_leaves_no_file(tmp_path: Path) -> None:
    out = tmp_path / "x.onnx"
    res = _run("zoo", "export", "gpt2", "--scale", "3", "-o", str(out))
    assert res.exit_code == 1 and not out.exists()
    assert list(tmp_path.iterdir()) == []
    res = _run("zoo", "export", "gpt2", "--scale", "0.1", "-o", str(tmp_path / "no" / "x.onnx"))
    assert res.exit_code == 1 and "does not exist" in res.stderr


def test_console_script_has_no_traceback_on_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "inspect", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
