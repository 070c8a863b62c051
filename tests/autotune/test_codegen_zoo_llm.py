"""Generated code for the zoo's language models at small scale, under the none, greedy and
max plans: every kernel alone and the whole runner reproduce onnxruntime's outputs (float32
within 1e-4), and every group the templates cannot express is named with its reason."""

from __future__ import annotations

import pytest
from codegen_helpers import check_plan, describe

from autotune.zoo.catalog import build

MODELS = {
    "gpt2": {"layers": 1, "seq_len": 8},
    "llama3-8b": {"layers": 1, "seq_len": 8},
    "gpt2-decode": {"layers": 1, "cache_len": 16},
    "llama3-8b-decode": {"layers": 1, "cache_len": 16},
}


@pytest.mark.parametrize("plan", ["none", "greedy", "max"])
@pytest.mark.parametrize("name", list(MODELS))
def test_generated_model_reproduces_onnxruntime(name: str, plan: str, tmp_path) -> None:
    model = build(name, weights="random", scale=0.05, batch=1, **MODELS[name])
    gen, result = check_plan(model, plan, tmp_path / "pkg")
    assert result.ok, describe(result)
    assert len(result.kernels) == len(gen.program.kernels) > 0
    assert all(reason for _, reason in gen.program.unfused)
