"""The vectorised AveragePool (autotune/verify/avgpool.py) returns what onnx's own reference
AveragePool returns, bit for bit: safe mode's verdicts read both the float64 reference and
the emulations' fallback through it, so it may change no number, only the time."""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from autotune.verify.pooling import FAST_OPS

_TYPES = {np.float64: TensorProto.DOUBLE, np.float32: TensorProto.FLOAT,
          np.float16: TensorProto.FLOAT16}  # fmt: skip


@st.composite
def pools(draw: st.DrawFn) -> tuple[np.ndarray, dict, int]:
    kh, kw = draw(st.integers(1, 12)), draw(st.integers(1, 4))  # windows past 8 and 128 values
    opset = draw(st.sampled_from([9, 11, 19]))
    attrs: dict = {"kernel_shape": [kh, kw]}
    if draw(st.booleans()):
        attrs["strides"] = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    auto = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto != "NOTSET":
        attrs["auto_pad"] = auto
    elif draw(st.booleans()):
        attrs["pads"] = [draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)),
                         draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))]  # fmt: skip
        attrs["ceil_mode"] = draw(st.integers(0, 1)) if opset >= 11 else 0
    if draw(st.booleans()):
        attrs["count_include_pad"] = draw(st.integers(0, 1))
    if opset >= 19 and auto == "NOTSET" and draw(st.booleans()):
        attrs["dilations"] = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    h = draw(st.integers(max(kh, 1) * 2, 16 + kh))
    w = draw(st.integers(max(kw, 1) * 2, 10))
    dtype = draw(st.sampled_from(list(_TYPES)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = (rng.standard_normal((2, 3, h, w)) * 10).astype(dtype)
    return x, attrs, opset


def _model(x: np.ndarray, attrs: dict, opset: int) -> onnx.ModelProto:
    t = _TYPES[x.dtype.type]
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", t, None)],
        [helper.make_tensor_value_info("y", t, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _both(x: np.ndarray, attrs: dict, opset: int) -> tuple[object, object]:
    model = _model(x, attrs, opset)
    try:
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    except Exception as err:  # onnx's own refuses it: so must the fast one, the same way
        want = type(err)
    try:
        (got,) = ReferenceEvaluator(model, new_ops=FAST_OPS).run(None, {"x": x})
    except Exception as err:
        got = type(err)
    return want, got


@settings(max_examples=300, deadline=None)
@given(pools())
def test_the_fast_average_pool_is_onnx_reference_bit_for_bit(
    case: tuple[np.ndarray, dict, int],
) -> None:
    want, got = _both(*case)
    if isinstance(want, type):
        assert got is want
        return
    assert isinstance(got, np.ndarray) and isinstance(want, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_nan_input_and_the_inception_pools_match_too() -> None:
    """NaN in the input goes to onnx's own loop; the pools of the model-zoo CNNs (3x3 stride 1
    pad 1, 7x7 with pads 0 0 1 1, 2x2 stride 2) are taken by the fast one, and equal."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 9, 9))
    x[0, 1, 2, 3] = np.nan
    cases = [
        (x, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}),
        (rng.standard_normal((1, 8, 14, 14)).astype(np.float32),
         {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}),
        (rng.standard_normal((1, 8, 7, 7)), {"kernel_shape": [7, 7], "pads": [0, 0, 1, 1]}),
        (rng.standard_normal((1, 8, 8, 8)).astype(np.float16),
         {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0]}),
    ]  # fmt: skip
    for x, attrs in cases:
        want, got = _both(x, attrs, 9)
        assert isinstance(got, np.ndarray) and isinstance(want, np.ndarray)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
