"""Generated code for the zoo's encoders and CNNs, the real torch exports in
tests/fixtures/exports, and a short tuned study's plan: every kernel alone and the whole
runner reproduce onnxruntime's outputs."""

from __future__ import annotations

import onnx
import pytest
from codegen_helpers import check_plan, check_zoo_model, describe
from conftest import EXPORTS, export_shapes

from autotune import tune
from search_space.onnx import read_model_with_data
from search_space.zoo.catalog import build

MODELS = {
    "bert-base": {"layers": 1, "seq_len": 8},
    "transformer-base": {"layers": 1, "seq_len": 8},
    "vit-b16": {"layers": 1},
    "resnet50": {},
    "mobilenetv3": {},
}
EXPORTED = ["bert_dynamo.onnx", "resnet18_dynamo.onnx"]


# every op alone ("none") for one encoder and one CNN: the others' lone ops take the same
# templates; experiments/bench_codegen.py generates every zoo model under every plan
CASES = [(m, p) for m in MODELS for p in ("none", "greedy", "max")]
SAMPLED = [c for c in CASES if c[1] != "none" or c[0] in ("bert-base", "resnet50")]


@pytest.mark.parametrize(("name", "plan"), SAMPLED)
def test_generated_model_reproduces_onnxruntime(name: str, plan: str, tmp_path) -> None:
    check_zoo_model(name, plan, tmp_path / "pkg", **MODELS[name])


@pytest.mark.parametrize("name", EXPORTED)
def test_real_exports_generate_and_reproduce_onnxruntime(name: str, tmp_path) -> None:
    model = read_model_with_data(EXPORTS / name)
    shapes = export_shapes(name, 1, 8)
    _, result = check_plan(model, "greedy", tmp_path / "pkg", input_shapes=shapes)
    assert result.ok, describe(result)


def test_a_tuned_plan_generates_and_reproduces_onnxruntime(tmp_path) -> None:
    model = build("bert-base", weights="random", scale=0.05, batch=1, layers=1, seq_len=8)
    path = tmp_path / "bert.onnx"
    onnx.save(model, path)
    plan = tune(str(path), trials=4, cost="analytic", storage=str(tmp_path / "s.journal"))
    _, result = check_plan(model, plan.record, tmp_path / "pkg")
    assert result.ok, describe(result)
