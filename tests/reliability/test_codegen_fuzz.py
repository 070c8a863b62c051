"""Fuzzing the code generator (issue 43), the bounded CI profile: random valid graphs of the
ops the tool fuses, generated under the none and max plans; every kernel alone and the whole
runner reproduce onnxruntime, and no graph makes generation fail (a group no template
expresses runs as its ops). The examples are the same on every run (derandomized)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from fuzz_graphs import graphs
from hypothesis import HealthCheck, given, settings

from autotune.codegen.check import check_package
from autotune.codegen.generate import generate
from costmodel.spec import load_target
from search_space import load_graph

FIXED = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@FIXED
@given(graphs())
def test_generated_code_of_random_graphs_reproduces_onnxruntime(model: onnx.ModelProto) -> None:
    graph = load_graph(model)
    target = load_target("ascend910b", (), "auto")
    for plan in ("none", "max"):
        gen = generate(model, graph, plan, target)
        with tempfile.TemporaryDirectory() as tmp:
            result = check_package(gen.write(Path(tmp) / "pkg"), model, gen.program)
        bad = [k.kernel for k in result.kernels if not k.ok]
        bad += [t.name for t in result.outputs if not t.ok]
        assert result.ok, f"{plan}: {bad}"
