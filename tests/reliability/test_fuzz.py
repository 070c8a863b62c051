"""Fuzzing (issue 23), the bounded CI profile: random valid graphs of the ops the tool fuses go
``tune`` (analytic model, 3 trials) -> ``apply`` -> ``verify``; the fused model equals the
original in onnxruntime and every kernel the plan keeps fused passes numerics.

The examples are the same on every run (derandomized). The long profile is
``experiments/fuzz.py``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from fuzz_check import check_model, compare, run_model
from fuzz_graphs import graphs
from hypothesis import HealthCheck, given, settings
from onnx import TensorProto as T
from onnx import helper, numpy_helper

FIXED = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _reads(model: onnx.ModelProto) -> list[str]:
    return [t for n in model.graph.node for t in n.input]


def _types(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


SHAPES: dict[str, Callable[[onnx.ModelProto], bool]] = {
    "several outputs": lambda m: len(m.graph.output) > 1,
    "fan-out": lambda m: any(_reads(m).count(n.output[0]) > 1 for n in m.graph.node),
    "an output also read": lambda m: bool({o.name for o in m.graph.output} & set(_reads(m))),
    "float16 inputs": lambda m: any(
        i.type.tensor_type.elem_type == T.FLOAT16 for i in m.graph.input
    ),
    "constants as nodes": lambda m: "Constant" in _types(m),
    "weights listed as inputs": lambda m: bool(
        {t.name for t in m.graph.initializer} & {i.name for i in m.graph.input}
    ),
    "a Cast": lambda m: "Cast" in _types(m),
    "conv + norm": lambda m: {"Conv", "BatchNormalization"} <= _types(m),
    "matmul + softmax": lambda m: {"MatMul", "Softmax"} <= _types(m),
    "eight nodes": lambda m: sum(n.op_type != "Constant" for n in m.graph.node) == 8,
    "views alone": lambda m: (
        _types(m) <= {"Constant", "Reshape", "Flatten", "Squeeze", "Unsqueeze"}
    ),
}


def test_drawn_models_are_valid_run_stay_finite_and_cover_the_shapes() -> None:
    """Every model passes onnx.checker (full check), runs in onnxruntime to finite outputs and
    has 1..8 nodes that compute (Constants aside); and the draws reach each shape of graph
    the fuzzing is meant to cover."""
    seen: set[str] = set()

    @settings(FIXED, max_examples=300)
    @given(graphs())
    def check(model: onnx.ModelProto) -> None:
        onnx.checker.check_model(model, full_check=True)
        assert 1 <= sum(n.op_type != "Constant" for n in model.graph.node) <= 8
        for out in run_model(model):
            assert np.isfinite(out.astype(np.float64)).all()
        seen.update(name for name, has in SHAPES.items() if has(model))

    check()
    assert seen == set(SHAPES), f"never drawn: {sorted(set(SHAPES) - seen)}"


@settings(FIXED, max_examples=60)
@given(graphs())
def test_tune_apply_verify_keeps_the_model_and_its_numerics(model: onnx.ModelProto) -> None:
    """Every command exits 0; the fused model is valid and equals the original in onnxruntime;
    verify passes every kernel the plan keeps fused, none left unverified."""
    with tempfile.TemporaryDirectory() as folder:
        got = check_model(model, Path(folder))
    assert got.category == "accepted", f"{got.category}:\n{got.detail}"
    assert got.unverified == 0, "a kernel kept fused was not verified"


def test_the_oracle_sees_a_fused_model_that_differs(tmp_path: Path) -> None:
    """The comparison is no formality: a fused model whose weight moved by 0.1% fails it."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    model = helper.make_model(
        helper.make_graph(
            [n("MatMul", ["x", "w"], ["y"], name="mm"), n("Relu", ["y"], ["z"], name="relu")],
            "g",
            [helper.make_tensor_value_info("x", T.FLOAT, [8, 16])],
            [helper.make_tensor_value_info("z", T.FLOAT, [8, 4])],
            [numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w")],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    assert check_model(model, tmp_path).category == "accepted"
    fused = onnx.load(tmp_path / "fused.onnx")
    assert any(node.domain == "ai.autofusion" for node in fused.graph.node)
    assert compare(model, fused) == ""
    [w] = [t for t in fused.graph.initializer if t.name == "w"]
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(1.001), "w"))
    assert "Mismatched elements" in compare(model, fused)
