"""The CLI as a user meets it: JSON shapes, tables, one-line errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from conftest import exporter_attention, i64, make
from onnx import TensorProto, helper
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
    names = {m["name"] for m in json.loads(res.stdout)["models"]}
    assert names == {
        "resnet50",
        "bert-base",
        "transformer-base",
        "gpt2",
        "llama3-8b",
        "mobilenetv3",
        "vit-b16",
        "gpt2-decode",
        "llama3-8b-decode",
    }


def test_zoo_export_takes_the_cache_flags(tmp_path: Path) -> None:
    """`zoo export` builds the decode step it is asked for: the cache length reaches the
    past inputs (static form: L + 1 slots), and a prefill model refuses a cache length."""
    out = tmp_path / "d.onnx"
    args = ["zoo", "export", "gpt2-decode", "--scale", "0.1", "--layers", "1", "--batch", "2"]
    res = _run(*args, "--cache-len", "16", "-o", str(out))
    assert res.exit_code == 0, res.output
    past = {i.name: i for i in onnx.load(out).graph.input}["past_key_values.0.key"]
    assert past.type.tensor_type.shape.dim[2].dim_value == 17
    res = _run("zoo", "export", "gpt2", "--cache-len", "16", "-o", str(tmp_path / "g.onnx"))
    assert res.exit_code == 1 and "has no KV cache" in res.stderr


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


def _json(*args: str) -> dict:
    res = _run(*args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_estimate_json_for_every_baseline_and_a_what_if() -> None:
    base = ["estimate", "zoo:bert-base", "--layers", "1", "--scale", "0.25", "--json"]
    results = {p: _json(*base, "--plan", p) for p in ("none", "greedy", "max", "optimal")}
    for plan, r in results.items():
        for key in (
            "model",
            "target",
            "plan",
            "cost_model",
            "latency",
            "roofline_us",
            "n_kernels",
            "kernels",
        ):
            assert key in r, key
        us = r["latency"]["us"]
        assert r["latency"]["kind"] == "predicted" and r["latency"]["model"] == "analytic"
        assert r["plan"] == plan and us >= r["roofline_us"] > 0
        assert {"ops", "kind", "config", "us", "bound"} <= set(r["kernels"][0])
        assert us == pytest.approx(sum(k["us"] for k in r["kernels"]))
        assert r["n_kernels"] == len(r["kernels"])
    n = {p: r["n_kernels"] for p, r in results.items()}
    assert n["none"] > n["greedy"] >= n["max"]
    slow = _json(*base, "--set", "hbm_bytes_per_s=6.5e11")
    assert slow["latency"]["us"] > results["none"]["latency"]["us"]


def test_estimate_replays_a_plan_file_and_refuses_another_models_plan(tmp_path: Path) -> None:
    from search_space.ir import KernelConfig
    from search_space.space import FusionPlan, PlanGroup

    args = ["zoo:bert-base", "--layers", "1", "--scale", "0.25"]
    greedy = _json("estimate", *args, "--plan", "greedy", "--json")
    fp = _json("inspect", *args, "--json")["fingerprint"]
    groups = tuple(
        PlanGroup(tuple(k["ops"]), k["kind"], KernelConfig.from_json(k["config"]))
        for k in greedy["kernels"]
    )
    path = FusionPlan(fp, "ascend910b", groups).save(tmp_path / "plan.json")
    again = _json("estimate", *args, "--plan", str(path), "--json")
    assert again["latency"]["us"] == pytest.approx(greedy["latency"]["us"])
    res = _run(
        "estimate", "zoo:bert-base", "--layers", "2", "--scale", "0.25", "--plan", str(path)
    )
    assert res.exit_code == 1 and "different model" in res.stderr


def test_estimate_of_a_model_of_views_alone_is_zero_without_shares(tmp_path: Path) -> None:
    """A model of views alone takes 0 us: the table says so (it divided by that 0, a
    traceback, found by the fuzzing of tests/reliability/test_fuzz.py)."""
    model = make(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        [i64("s", [6])],
    )
    onnx.save(model, tmp_path / "views.onnx")
    res = _run("estimate", str(tmp_path / "views.onnx"))
    assert res.exit_code == 0 and res.exception is None, res.output
    assert "0.0 us over 0 kernels" in res.stdout and "of the estimate" not in res.stdout


def test_candidates_json_reports_edges_classes_and_verdicts() -> None:
    r = _json("candidates", "zoo:bert-base", "--layers", "2", "--scale", "0.25", "--json")
    assert r["edges"] >= r["edge_classes"] == r["decision_vars"]["with_sharing"]
    assert r["decision_vars"]["without_sharing"] == r["edges"]
    verdicts = {c["verdict"] for c in r["candidates"]}
    assert "fuse" in verdicts and all(
        {"ops", "rule", "verdict", "reason"} <= set(c) for c in r["candidates"]
    )
    r0 = _json(
        "candidates",
        "zoo:bert-base",
        "--layers",
        "1",
        "--scale",
        "0.25",
        "--fusion-level",
        "0",
        "--json",
    )
    assert {c["verdict"] for c in r0["candidates"]} == {"skip: policy"}


def test_unknown_target_is_one_line() -> None:
    res = _run("estimate", "zoo:gpt2", "--scale", "0.1", "--target", "tpu9")
    assert res.exit_code == 1 and "unknown target 'tpu9'" in res.stderr
