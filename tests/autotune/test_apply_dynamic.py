"""A plan tuned over shape ranges applied to a model with dynamic dims: the fused model keeps
them, and onnxruntime runs it at several shapes of the range with the original's outputs
(issue 49, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from quick_study import FAST, run

WIDTH = 32


def _model() -> onnx.ModelProto:
    """x[batch, seq, 32] -> MatMul, Add, Relu, MatMul, Add, the residual, LayerNormalization."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)

    inits = [
        weight("w1", WIDTH, 64), weight("b1", 64), weight("w2", 64, WIDTH), weight("b2", WIDTH),
        weight("gamma", WIDTH), weight("beta", WIDTH),
    ]  # fmt: skip
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="up"),
        helper.make_node("Add", ["h1", "b1"], ["h2"], name="up_bias"),
        helper.make_node("Relu", ["h2"], ["h3"], name="act"),
        helper.make_node("MatMul", ["h3", "w2"], ["h4"], name="down"),
        helper.make_node("Add", ["h4", "b2"], ["h5"], name="down_bias"),
        helper.make_node("Add", ["h5", "x"], ["h6"], name="residual"),
        helper.make_node(
            "LayerNormalization", ["h6", "gamma", "beta"], ["y"], name="norm", axis=-1
        ),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", WIDTH])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", WIDTH])
    graph = helper.make_graph(nodes, "mlp", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The model file and a plan tuned for it over batch 1..4 and seq 8..32."""
    folder = tmp_path_factory.mktemp("dynamic")
    path = folder / "mlp.onnx"
    onnx.save(_model(), path)
    res = run(
        "tune", str(path), "--shape-range", "batch=1..4", "--shape-range", "seq=8..32",
        "--trials", "4", *FAST, "--storage", str(folder / "s.journal"),
        "-o", str(folder / "plan.json"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return path, folder / "plan.json"


def test_a_range_plan_fuses_a_dynamic_model_that_runs_at_every_shape(
    tuned: tuple[Path, Path], tmp_path: Path
) -> None:
    path, plan_path = tuned
    plan = json.loads(plan_path.read_text())
    assert plan["dim_axes"] == {"batch": ["x", 0, 0], "seq": ["x", 1, 0]}
    assert any(len(g["ops"]) > 1 for g in plan["groups"])  # something is fused
    fused_path = tmp_path / "fused.onnx"
    res = run(
        "apply", str(path), str(plan_path), "--input-shape", "x=3x20x32", "-o", str(fused_path)
    )
    assert res.exit_code == 0, res.output
    fused = onnx.load(fused_path)
    dims = [d.dim_param for d in fused.graph.input[0].type.tensor_type.shape.dim[:2]]
    assert dims == ["batch", "seq"]  # still dynamic
    assert any(n.domain == "ai.autofusion" for n in fused.graph.node)
    original = onnx.load(path)
    rng = np.random.default_rng(1)
    for batch, seq in ((1, 8), (3, 20), (4, 32), (2, 9)):
        x = rng.standard_normal((batch, seq, WIDTH)).astype(np.float32)
        np.testing.assert_allclose(_run(fused, x), _run(original, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", ["5x20x32", "2x40x32"])
def test_apply_refuses_a_shape_outside_the_plans_range(
    tuned: tuple[Path, Path], tmp_path: Path, shape: str
) -> None:
    path, plan_path = tuned
    res = run(
        "apply", str(path), str(plan_path), "--input-shape", f"x={shape}",
        "-o", str(tmp_path / "fused.onnx"),
    )  # fmt: skip
    assert res.exit_code == 1 and "outside the range" in res.stderr
    assert not (tmp_path / "fused.onnx").exists()
