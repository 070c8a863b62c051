"""Generated code for the zoo's language models at small scale, under the none, greedy and
max plans: every kernel alone and the whole runner reproduce onnxruntime's outputs (float32
within 1e-4), and every group the templates cannot express is named with its reason."""

from __future__ import annotations

import pytest
from codegen_helpers import check_zoo_model

MODELS = {
    "gpt2": {"layers": 1, "seq_len": 8},
    "llama3-8b": {"layers": 1, "seq_len": 8},
    "gpt2-decode": {"layers": 1, "cache_len": 16},
    "llama3-8b-decode": {"layers": 1, "cache_len": 16},
}


@pytest.mark.parametrize("plan", ["none", "greedy", "max"])
@pytest.mark.parametrize("name", list(MODELS))
def test_generated_model_reproduces_onnxruntime(name: str, plan: str, tmp_path) -> None:
    check_zoo_model(name, plan, tmp_path / "pkg", **MODELS[name])
