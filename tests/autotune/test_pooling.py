"""The pools replacing onnx's in its reference evaluator equal onnxruntime's (an independent
implementation): the vectorised MaxPool (onnx's own reference pool reads 2-D pads in another
order on its stride-1 path, so it is no oracle), and GlobalMaxPool at every rank."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from autotune.verify.pooling import FAST_OPS


@st.composite
def pools(draw: st.DrawFn) -> tuple[np.ndarray, dict]:
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    attrs = {
        "kernel_shape": [kh, kw],
        "strides": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "pads": [draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)),
                 draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))],
        "ceil_mode": draw(st.integers(0, 1)),
    }  # fmt: skip
    h, w = draw(st.integers(kh, 12)), draw(st.integers(kw, 12))
    seed = draw(st.integers(0, 2**16))
    x = np.random.default_rng(seed).standard_normal((2, 3, h, w))
    return x, attrs


def _model(attrs: dict) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, None)
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@settings(max_examples=120, deadline=None)
@given(pools())
def test_the_fast_max_pool_equals_onnx_reference(case: tuple[np.ndarray, dict]) -> None:
    x, attrs = case
    model = _model(attrs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    (got,) = ReferenceEvaluator(model, new_ops=FAST_OPS).run(None, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_max_pool_keeps_the_channels_at_every_rank(shape: tuple[int, ...]) -> None:
    """onnx's own GlobalMaxPool reduces the wrong axes unless it pools over two ([2, 3, 5]
    came out [2, 1]); found by the fuzzing of tests/reliability/test_fuzz.py."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("GlobalMaxPool", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    (got,) = ReferenceEvaluator(model, new_ops=FAST_OPS).run(None, {"x": x})
    assert got.shape == want.shape == (*shape[:2], *(1,) * (len(shape) - 2))
    np.testing.assert_array_equal(got, want)
