"""Real HF decode steps (past_key_values in, present out) through inspect, tune, apply, verify.

The fixtures in tests/fixtures/exports/decode/ are the tiny GPT-2 and Llama of the prefill
exports with their LM heads, one new token over HF's dynamic cache (present = past ++ new row),
written by the legacy and the dynamo torch exporter (experiments/export_torch_models.py). Their
inputs are dynamic in batch and past length; the mask and present are `past + 1` long.
onnxruntime on the fixtures is the oracle; nothing here needs torch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import EXPORTS
from typer.testing import CliRunner

from autotune.cli import app

DECODE = EXPORTS / "decode"
FILES = sorted(p.name for p in DECODE.glob("*.onnx"))
BATCH, PAST = 2, 16


def dims(batch: int, past: int) -> dict[str, int]:
    return {"batch": batch, "past": past, "past + 1": past + 1}


def input_shapes(name: str, batch: int = BATCH, past: int = PAST) -> dict[str, tuple[int, ...]]:
    """Every input's shape at (batch, past), from the dims the fixture declares."""
    sizes = dims(batch, past)
    model = onnx.load(str(DECODE / name), load_external_data=False)
    return {
        vi.name: tuple(sizes[d.dim_param] if d.dim_param else d.dim_value for d in _dims(vi))
        for vi in model.graph.input
    }


def _dims(vi: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension]:
    return list(vi.type.tensor_type.shape.dim)


def shape_flags(name: str, batch: int = BATCH, past: int = PAST) -> list[str]:
    shapes = input_shapes(name, batch, past)
    return [f for n, s in shapes.items() for f in ("--input-shape", f"{n}={_x(s)}")]


def _x(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def feeds(name: str, batch: int = BATCH, past: int = PAST, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids < 100, a mask with one left-padded row, generate()'s positions, a filled cache."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for n, shape in input_shapes(name, batch, past).items():
        if n == "input_ids":
            out[n] = rng.integers(0, 100, size=shape, dtype=np.int64)
        elif n == "attention_mask":
            out[n] = np.ones(shape, dtype=np.int64)
            if batch > 1 and past > 2:
                out[n][1, :2] = 0
        elif n == "position_ids":
            out[n] = out["attention_mask"].sum(-1, keepdims=True) - 1
        else:
            out[n] = rng.standard_normal(shape).astype(np.float32)
    return out


def run(path: Path | str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, inputs), strict=True))


def past_names(name: str) -> list[str]:
    return [n for n in input_shapes(name) if n.startswith("past_key_values.")]


# -- the fixtures ----------------------------------------------------------------------------
def test_both_exporters_wrote_both_models() -> None:
    models = ("gpt2_decode", "llama_decode")
    assert FILES == sorted(f"{m}_{e}.onnx" for m in models for e in ("dynamo", "legacy_op14"))
    log = json.loads((DECODE / "export_log.json").read_text())
    assert sorted(log["files"]) == FILES and log["failures"] == {}
    assert all(log["ort_check"][f]["ok"] for f in FILES)  # vs eager torch, when exported


@pytest.mark.parametrize("name", FILES)
def test_present_is_the_past_then_one_new_row(name: str) -> None:
    inputs = feeds(name)
    got = run(DECODE / name, inputs)
    assert got["logits"].shape == (BATCH, 1, 100)
    for past in past_names(name):
        present = got[past.replace("past_key_values", "present")]
        b, heads, p, d = inputs[past].shape
        assert present.shape == (b, heads, p + 1, d)
        np.testing.assert_array_equal(present[:, :, :p], inputs[past])  # the cache, untouched
    # layer 0's new row depends on the new token alone; the logits read the whole cache
    moved = dict(inputs)
    for past in past_names(name):
        moved[past] = inputs[past] + 1.0
    again = run(DECODE / name, moved)
    for kind in ("key", "value"):
        np.testing.assert_allclose(
            again[f"present.0.{kind}"][:, :, PAST], got[f"present.0.{kind}"][:, :, PAST], atol=1e-6
        )
    assert not np.allclose(again["logits"], got["logits"], atol=1e-3)


@pytest.mark.parametrize("model", ["gpt2_decode", "llama_decode"])
def test_the_two_exporters_agree(model: str) -> None:
    legacy, dynamo = f"{model}_legacy_op14.onnx", f"{model}_dynamo.onnx"
    for batch, past in [(BATCH, PAST), (1, 1), (3, 40)]:
        inputs = feeds(legacy, batch, past, seed=past)
        assert input_shapes(legacy, batch, past) == input_shapes(dynamo, batch, past)
        a, b = run(DECODE / legacy, inputs), run(DECODE / dynamo, inputs)
        assert list(a) == list(b)
        for out in a:
            np.testing.assert_allclose(a[out], b[out], rtol=1e-5, atol=1e-5, err_msg=out)


# -- inspect ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FILES)
def test_inspect_without_shapes_is_one_line_naming_each_input(name: str) -> None:
    res = CliRunner().invoke(app, ["inspect", str(DECODE / name)])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: dynamic graph input(s)"), lines
    for n in input_shapes(name):  # every input has a dynamic batch; the cache also its length
        assert f"--input-shape {n}=" in lines[0], n


@pytest.mark.parametrize("name", FILES)
def test_the_suggested_input_shapes_agree_with_the_declared_dims(name: str) -> None:
    res = CliRunner().invoke(app, ["inspect", str(DECODE / name)])
    suggested = dict(re.findall(r"--input-shape (\S+)=(\d+(?:x\d+)*)", res.stderr))
    shapes = {n: tuple(int(v) for v in s.split("x")) for n, s in suggested.items()}
    past = shapes[past_names(name)[0]][2]
    assert shapes == input_shapes(name, shapes["input_ids"][0], past)


@pytest.mark.parametrize("name", FILES)
def test_inspect_with_shapes_is_fully_static(name: str) -> None:
    res = CliRunner().invoke(app, ["inspect", str(DECODE / name), *shape_flags(name), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["dynamic_tensors"] == []
    assert {n: tuple(s) for n, s in info["inputs"].items()} == input_shapes(name)
    outputs = {n: tuple(s) for n, s in info["outputs"].items()}
    assert outputs.pop("logits") == (BATCH, 1, 100)
    shapes = input_shapes(name)
    for past in past_names(name):
        b, heads, p, d = shapes[past]
        assert outputs.pop(past.replace("past_key_values", "present")) == (b, heads, p + 1, d)
    assert outputs == {}


# -- the pipeline ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [n for n in FILES],
)
def test_tune_apply_verify(name: str, tmp_path: Path) -> None:
    path, flags = str(DECODE / name), shape_flags(name)
    plan, fused = str(tmp_path / "plan.json"), tmp_path / "fused.onnx"
    runner = CliRunner()
    res = runner.invoke(
        app,
        ["tune", path, *flags, "--trials", "4", "--cost", "analytic", "--polish", "0",
         "--measure-every", "2", "--storage", str(tmp_path / "s.journal"), "-o", plan],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert any(len(g["ops"]) > 1 for g in json.loads(Path(plan).read_text())["groups"])
    res = runner.invoke(app, ["apply", path, *flags, plan, "-o", str(fused)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["verify", path, *flags, plan, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ok"] is True
    # the fused model keeps the dynamic axes (it equals the original at other sizes too),
    # but where shape math from inside a fused kernel feeds another kernel that feeds it back
    # (legacy GPT-2's position ids: Shape(present) -> ... -> wpe Gather -> the embeddings'
    # Add), which apply cuts at the value the loader folded: that model is static
    static = name == "gpt2_decode_legacy_op14.onnx"
    for batch, past in [(BATCH, PAST)] if static else [(BATCH, PAST), (3, 5)]:
        inputs = feeds(name, batch, past, seed=7)
        want, got = run(DECODE / name, inputs), run(fused, inputs)
        assert list(got) == list(want)
        for out in want:
            np.testing.assert_allclose(got[out], want[out], rtol=1e-4, atol=1e-5, err_msg=out)
