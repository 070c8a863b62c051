"""The vectorised MaxPool equals onnxruntime's MaxPool (an independent implementation; onnx's
own reference pool reads 2-D pads in another order on its stride-1 path, so it is no oracle)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
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
