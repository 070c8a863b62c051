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


# every op alone ("none") for the GPT-2 prompt and decode step: llama's lone ops take the
# same templates; experiments/bench_codegen.py generates every zoo model under every plan
CASES = [(m, p) for m in MODELS for p in ("none", "greedy", "max")]
SAMPLED = [c for c in CASES if c[1] != "none" or c[0].startswith("gpt2")]


@pytest.mark.parametrize(("name", "plan"), SAMPLED)
def test_generated_model_reproduces_onnxruntime(name: str, plan: str, tmp_path) -> None:
    check_zoo_model(name, plan, tmp_path / "pkg", **MODELS[name])
