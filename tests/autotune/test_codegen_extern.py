"""extern_op, the PyTorch fallback of a generated runner, against onnxruntime: one-node ONNX
models on seeded inputs, every op in SUPPORTED, with non-trivial attributes. The ONNX reference
evaluator is the oracle only where a case says so."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from autotune.codegen.extern import SUPPORTED, ExternError, extern_op

RNG = np.random.default_rng(0)
INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


@dataclass(frozen=True)
class Case:
    """One node: its op type, inputs (None for an omitted optional one), attributes."""

    op: str
    inputs: tuple[np.ndarray | None, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    n_outputs: int = 1
    opset: int = 17
    oracle: str = "ort"  # or "reference": onnx.reference.ReferenceEvaluator


def c(op: str, *inputs: np.ndarray | None, n: int = 1, opset: int = 17, **attrs: Any) -> Any:
    case = Case(op, inputs, attrs, n, opset)
    label = ",".join(f"{k}={v}" for k, v in attrs.items() if not isinstance(v, np.ndarray))
    return pytest.param(case, id=f"{op}[{label}]" if label else op)


def f(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def pos(*shape: int) -> np.ndarray:
    return f(*shape, lo=0.25, hi=2.0)


def ints(*shape: int, lo: int = -5, hi: int = 6, dtype: Any = np.int64) -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(dtype)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def flags(*shape: int) -> np.ndarray:
    return RNG.integers(0, 2, shape).astype(bool)


def scalar(value: Any, dtype: Any) -> np.ndarray:
    return np.array(value, dtype=dtype)


def _model(case: Case) -> onnx.ModelProto:
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(case.inputs)]
    outputs = [f"out{i}" for i in range(case.n_outputs)]
    attrs = {
        k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
        for k, v in case.attrs.items()
    }
    node = helper.make_node(case.op, names, outputs, **attrs)
    inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), None)
        for name, v in zip(names, case.inputs, strict=True)
        if v is not None
    ]
    graph = helper.make_graph([node], "g", inputs, [onnx.ValueInfoProto(name=o) for o in outputs])
    opset = [helper.make_opsetid("", case.opset)]
    ir = 8 if case.opset <= 17 else helper.find_min_ir_version_for(opset)
    return helper.make_model(graph, opset_imports=opset, ir_version=ir)


@functools.cache
def _session(model: bytes) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def reference(case: Case) -> list[np.ndarray]:
    model = _model(case)
    feeds = {f"in{i}": v for i, v in enumerate(case.inputs) if v is not None}
    if case.oracle == "reference":
        return list(ReferenceEvaluator(model).run(None, feeds))
    return list(_session(model.SerializeToString()).run(None, feeds))


def check(case: Case) -> None:
    """extern_op's outputs equal the oracle's: same dtype and shape, values to float32
    tolerance (exact for ints and bools), contiguous."""
    want = reference(case)
    inputs = [None if v is None else torch.from_numpy(v.copy()) for v in case.inputs]
    got = extern_op(case.op, case.attrs, inputs, case.n_outputs)
    assert len(got) == len(want) == case.n_outputs
    for g, w in zip(got, want, strict=True):
        assert g.is_contiguous()
        out = g.numpy()
        assert (out.dtype, out.shape) == (w.dtype, w.shape)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(out, w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(out, w)


def _elementwise() -> list[Any]:
    x = f(2, 3, 4)
    plain = "Abs Neg Exp Relu Sigmoid Tanh Erf Floor Ceil Sign Sin Cos Tan Atan Sinh Cosh"
    halves = np.round(f(3, 8) * 4) / 2  # many exact halves for Round
    special = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], np.float32)
    return [
        *(c(op, x) for op in plain.split()),
        c("Sqrt", pos(3, 4)),
        c("Log", pos(3, 4)),
        c("Reciprocal", pos(3, 4)),
        c("Asin", f(3, 4, lo=-0.9, hi=0.9)),
        c("Acos", f(3, 4, lo=-0.9, hi=0.9)),
        c("Round", halves),
        c("Softplus", f(3, 4, lo=-30, hi=30)),
        c("Softsign", x),
        c("Mish", x, opset=18),
        c("HardSwish", f(3, 4, lo=-4, hi=4)),
        c("HardSigmoid", f(3, 4, lo=-6, hi=6), alpha=0.3, beta=0.4),
        c("LeakyRelu", x, alpha=0.2),
        c("Elu", x, alpha=0.7),
        c("Selu", x),
        c("Celu", x, alpha=1.5),
        c("ThresholdedRelu", x, alpha=0.5),
        c("Gelu", x, opset=20),
        c("Gelu", x, approximate="tanh", opset=20),
        c("IsNaN", special),
        c("IsInf", special),
        c("IsInf", special, detect_negative=0),
        c("Not", flags(3, 4)),
        c("Identity", x),
        c("Relu", ints(3, 4, dtype=np.int32)),
    ]


def _binary() -> list[Any]:
    x, y = f(2, 3, 4), f(3, 1)
    return [
        *(c(op, x, y) for op in ("Add", "Sub", "Mul", "Max", "Min", "Less", "Greater")),
        c("Div", x, pos(4)),
        c("Div", ints(4, 6, lo=-20, hi=20, dtype=np.int32), ints(6, lo=1, hi=7, dtype=np.int32)),
        c("Div", ints(2, 3), -ints(3, lo=1, hi=4)),
        c("Pow", pos(2, 3), f(3)),
        c("Pow", pos(2, 3), i64(2, 3, -1)),
        c("Equal", ints(3, 4, lo=0, hi=3), ints(4, lo=0, hi=3)),
        c("LessOrEqual", ints(3, 4, lo=0, hi=3), ints(1, lo=0, hi=3)),
        c("GreaterOrEqual", x, np.round(y)),
        *(c(op, flags(3, 4), flags(4)) for op in ("And", "Or", "Xor")),
        c("Mod", ints(3, 4, lo=-9, hi=10), np.array([-4, -3, 3, 4], np.int64)),
        c("Mod", x * 3, pos(4), fmod=1),
        c("PRelu", x, f(3, 1)),
        c("Max", x, f(4), f(3, 1)),
        c("Min", ints(3, 1), ints(1, 4)),
        c("Mean", x, f(4), f(1, 3, 1)),
        c("Sum", x, f(4), f(1, 3, 1)),
        c("Where", flags(3, 1), x, f(4)),
        c("Clip", x, scalar(-0.5, np.float32), scalar(0.5, np.float32)),
        c("Clip", ints(3, 4), None, scalar(2, np.int64)),
        c("Clip", x),
    ]


def _casts() -> list[Any]:
    x = f(3, 4, lo=-100, hi=100)
    return [
        *(c("Cast", x, to=t) for t in (7, 6, 5, 3, 10, 11, 9)),
        c("Cast", np.abs(x), to=2),
        c("Cast", flags(3, 4), to=1),
        c("Cast", ints(3, 4), to=1),
        c("CastLike", x, ints(1, dtype=np.int32)),
        c("CastLike", ints(3, 4), f(1)),
    ]


def _misc() -> list[Any]:
    x = f(2, 3, 4, 4)
    stats = (f(3), f(3), f(3), pos(3))
    return [
        c("BatchNormalization", x, *stats, epsilon=1e-3),
        c("Dropout", x),
        c("Dropout", x, scalar(0.3, np.float32), scalar(False, np.bool_), n=2),
        c("Trilu", f(2, 4, 5)),
        c("Trilu", f(2, 4, 5), i64(-1), upper=0),
        c("Trilu", f(4, 5), i64(2)),
        c("Range", scalar(1.0, np.float32), scalar(4.0, np.float32), scalar(0.5, np.float32)),
        c("Range", scalar(10, np.int64), scalar(-3, np.int64), scalar(-4, np.int64)),
        c("Range", scalar(2, np.int32), scalar(9, np.int32), scalar(3, np.int32)),
        c("ConstantOfShape", i64(2, 3)),
        c("ConstantOfShape", i64(4), value=np.array([7], np.int64)),
        c("ConstantOfShape", i64(2, 1), value=np.array([1.5], np.float32)),
        c("Einsum", f(2, 3, 4), f(2, 4, 5), equation="bij,bjk->bik"),
        c("Einsum", f(3, 3), equation="ii->i"),
    ]


def _reductions() -> list[Any]:
    x = f(2, 3, 4)
    names = "Sum Mean Max Min Prod L1 L2 SumSquare LogSumExp"
    return [
        *(c(f"Reduce{r}", x, axes=[-1, 0], keepdims=0) for r in names.split() if r != "Sum"),
        *(c(f"Reduce{r}", x, i64(1), opset=18) for r in names.split()),
        c("ReduceLogSum", pos(2, 3, 4), axes=[1]),
        c("ReduceLogSum", pos(2, 3, 4), i64(-2), keepdims=0, opset=18),
        c("ReduceSum", x, i64(-1, 0), keepdims=0),
        c("ReduceSum", x, None, noop_with_empty_axes=1),
        c("ReduceSum", ints(2, 3, dtype=np.int32), i64(1)),
        c("ReduceMax", x),
        c("ReduceMin", ints(2, 3, 4), axes=[2]),
        c("ReduceMean", ints(3, 4, dtype=np.int32), axes=[-1]),
        c("ReduceProd", f(2, 3, 4, lo=0.5, hi=1.5), keepdims=0),
        c("Softmax", x, axis=1),
        c("Softmax", x),
        c("LogSoftmax", x),
        c("LogSoftmax", x, axis=-3),
        c("ArgMax", ints(3, 5, lo=0, hi=3), axis=-1, keepdims=0, select_last_index=1),
        c("ArgMax", ints(3, 5, lo=0, hi=3)),
        c("ArgMin", ints(3, 5, lo=0, hi=3), axis=1),
        c("ArgMin", x, axis=2, keepdims=0, select_last_index=1),
        c("CumSum", x, i64(-1)),
        c("CumSum", x, scalar(1, np.int64), exclusive=1, reverse=1),
        c("CumSum", ints(3, 4, dtype=np.int32), scalar(0, np.int32), exclusive=1),
        c("CumSum", ints(3, 4), i64(1), reverse=1),
    ]


def _norms() -> list[Any]:
    x = f(2, 4, 3, 5)
    return [
        c("LayerNormalization", x, f(3, 5), f(5), axis=-2),
        c("LayerNormalization", x, f(5), n=3, epsilon=1e-3),
        c("GroupNormalization", x, f(4), f(4), num_groups=2, epsilon=1e-3, opset=21),
        c("GroupNormalization", x, f(2), f(2), num_groups=2, opset=18),
        c("InstanceNormalization", x, f(4), f(4), epsilon=1e-4),
        c("RMSNormalization", x, f(5), opset=23),
        c("RMSNormalization", x, f(3, 5), axis=-2, epsilon=1e-3, opset=23),
        c("LpNormalization", x, axis=1, p=1),
        c("LpNormalization", np.concatenate([x, np.zeros((2, 4, 3, 1), np.float32)], -1)),
    ]


def _pooling() -> list[Any]:
    x2, x1, x3 = f(2, 3, 7, 6), f(2, 3, 9), f(1, 2, 5, 6, 4)
    k3: dict[str, Any] = {"kernel_shape": [3, 3]}
    corner = {
        **k3,
        "strides": [2, 3],
        "pads": [1, 2, 1, 2],
        "ceil_mode": 1,
        "count_include_pad": 1,
    }
    return [
        c("GlobalAveragePool", x2),
        c("GlobalMaxPool", x3),
        c("MaxPool", x2, **k3, strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1),
        c("MaxPool", x2, kernel_shape=[2, 3], strides=[3, 2], dilations=[2, 1], ceil_mode=1),
        c("MaxPool", x2, kernel_shape=[2, 2], strides=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1),
        c("MaxPool", x2, **k3, strides=[2, 2], auto_pad="SAME_UPPER"),
        c("MaxPool", x2, **k3, strides=[2, 1], auto_pad="SAME_LOWER"),
        c("MaxPool", x1, kernel_shape=[4], strides=[2], auto_pad="VALID"),
        c("MaxPool", x3, kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[0, 1, 0, 1, 1, 1]),
        c("MaxPool", ints(1, 2, 5, 5, dtype=np.int8), kernel_shape=[2, 2], pads=[1, 1, 0, 0]),
        c("AveragePool", x2, **k3, strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
        c("AveragePool", x2, **k3, strides=[2, 2], pads=[1, 0, 2, 1], count_include_pad=1),
        c("AveragePool", x2, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        c("AveragePool", x2, **k3, strides=[2, 2], ceil_mode=1, count_include_pad=1, pads=[1] * 4),
        c("AveragePool", x2, **k3, strides=[2, 2], auto_pad="SAME_LOWER"),
        c("AveragePool", x1, kernel_shape=[3], strides=[2], pads=[2, 1]),
        c("AveragePool", x3, kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1),
        c("AveragePool", x2, kernel_shape=[2, 2], dilations=[2, 2], pads=[1] * 4, opset=19),
        # ceil-mode overflow in the first dim meets explicit pads in the second (the corners)
        c("AveragePool", f(1, 2, 8, 4), **corner),
        c("AveragePool", f(1, 2, 8, 4), **corner, dilations=[2, 2], opset=19),
        # onnxruntime sizes SAME pads of a dilated pool by the undilated kernel
        c("MaxPool", x2, **k3, strides=[2, 1], dilations=[2, 1], auto_pad="SAME_LOWER"),
    ]


def _cube() -> list[Any]:
    x2 = f(2, 4, 7, 6)
    return [
        c("MatMul", f(2, 1, 3, 4), f(5, 4, 2)),
        c("MatMul", f(4), f(3, 4, 2)),
        c("MatMul", f(3, 4), f(4)),
        c("Gemm", f(4, 3), f(5, 4), f(1, 5), alpha=0.5, beta=2.0, transA=1, transB=1),
        c("Gemm", f(3, 4), f(4, 5), f(5)),
        c("Gemm", f(3, 4), f(4, 5)),
        c("Conv", x2, f(6, 2, 3, 3), f(6), strides=[2, 1], pads=[1, 0, 2, 1], group=2),
        c("Conv", x2, f(3, 4, 2, 3), dilations=[2, 1], strides=[1, 2], pads=[1, 1, 1, 1]),
        c("Conv", x2, f(4, 1, 3, 3), f(4), group=4, auto_pad="SAME_UPPER", strides=[2, 2]),
        c("Conv", x2, f(4, 4, 2, 2), auto_pad="SAME_LOWER"),
        c("Conv", f(2, 3, 9), f(4, 3, 3), f(4), strides=[2], dilations=[2], pads=[1, 2]),
        c("Conv", f(1, 2, 4, 5, 4), f(3, 2, 2, 3, 2), pads=[1, 0, 1, 0, 1, 0], auto_pad="NOTSET"),
        c("Conv", x2, f(2, 4, 3, 3), auto_pad="VALID", strides=[2, 2]),
        c("ConvTranspose", f(2, 4, 3, 4), f(4, 3, 3, 3), f(6), strides=[2, 2], group=2),
        c(
            "ConvTranspose",
            f(1, 2, 4, 3),
            f(2, 3, 3, 2),
            strides=[2, 3],
            pads=[1, 0, 1, 1],
            output_padding=[1, 2],
            dilations=[1, 2],
        ),
        c("ConvTranspose", f(2, 3, 5), f(3, 2, 4), f(2), strides=[3], pads=[2, 1]),
    ]


def _layout() -> list[Any]:
    x = f(2, 3, 4)
    return [
        c("Reshape", x, i64(0, -1, 2)),
        c("Reshape", f(0, 3), i64(3, 0), allowzero=1),
        c("Flatten", x, axis=-1),
        c("Flatten", x, axis=0),
        c("Flatten", x),
        c("Squeeze", f(2, 1, 3, 1), i64(-1)),
        c("Squeeze", f(1, 3, 1)),
        c("Unsqueeze", x, i64(-1, 0)),
        c("Unsqueeze", x, i64(3, -5)),
        c("Transpose", x, perm=[1, 2, 0]),
        c("Transpose", x),
        c("Concat", x, f(2, 1, 4), f(2, 2, 4), axis=-2),
        c("Split", f(2, 5), i64(1, 4), axis=-1, n=2),
        c("Split", f(7, 2), num_outputs=3, n=3, opset=18),
        c("Split", f(2, 6), axis=1, n=3),
        c("Slice", x, i64(-1, 0), i64(INT64_MIN, 3), i64(2, 1), i64(-2, -1)),
        c("Slice", x, i64(1), i64(1000)),
        c("Gather", x, i64(-1, 0, 2, -3).reshape(2, 2), axis=1),
        c("Gather", x, scalar(-1, np.int64)),
        c("Gather", x, np.array([[3], [-4]], np.int32), axis=-1),
        c("GatherElements", x, ints(2, 2, 4, lo=-3, hi=3), axis=1),
        c("GatherElements", x, ints(1, 3, 2, lo=-4, hi=4), axis=-1),
        c("GatherND", x, np.array([[0, -1], [1, 2]], np.int64)),
        c("GatherND", x, np.array([[[2], [0]], [[-1], [1]]], np.int64), batch_dims=1),
        c("GatherND", f(2, 3, 4, 2), np.array([[1, 3], [2, -1]], np.int64), batch_dims=1),
        c("Expand", f(3, 1), i64(2, 1, 4)),
        c("Expand", f(2, 3, 1), i64(3, 1)),
        c("Tile", x, i64(2, 1, 3)),
        c("DepthToSpace", f(2, 8, 3, 2), blocksize=2),
        c("DepthToSpace", f(2, 8, 3, 2), blocksize=2, mode="CRD"),
        c("SpaceToDepth", f(2, 3, 4, 6), blocksize=2),
        c("Shape", x),
        c("Shape", x, start=-2),
        c("Shape", x, start=1, end=-1),
        c("Size", x),
    ]


def _pads_and_scatters() -> list[Any]:
    x = f(2, 3, 4)
    data, upd = f(4, 3, 2), f(2, 3, 2)
    return [
        c("Pad", x, i64(0, 1, 2, 1, 0, 3), scalar(1.5, np.float32)),
        c("Pad", x, i64(1, -1, 2, 0), None, i64(-1, 0), opset=18),
        c("Pad", x, i64(0, 2, 3, 0, 1, 3), mode="reflect"),
        c("Pad", x, i64(0, 2, 3, 0, 1, 5), mode="edge"),
        c("Pad", x, i64(0, 2, 3, 0, -1, 5), mode="wrap", opset=19),
        c("Pad", ints(3, 4), i64(1, 0, 1, 2), scalar(-7, np.int64)),
        c("ScatterND", data, np.array([[1], [-1]], np.int64), upd),
        c(
            "ScatterND",
            data,
            np.array([[0, 1], [0, 1], [3, -1]], np.int64),
            f(3, 2),
            reduction="add",
        ),
        c("ScatterND", data, np.array([[2, 0, 1], [0, 2, 0]], np.int64), f(2), reduction="mul"),
        c("ScatterND", data, np.array([[1], [3]], np.int64), upd, reduction="max", opset=18),
        c("ScatterElements", x, ints(2, 2, 4, lo=-3, hi=3), f(2, 2, 4), axis=1, reduction="add"),
        c("ScatterElements", x, np.array([[[0, -1]]], np.int64), f(1, 1, 2), axis=-1),
        c("ScatterElements", x, ints(1, 3, 4, lo=0, hi=2), f(1, 3, 4), reduction="min", opset=18),
    ]


CASES = [
    *_elementwise(),
    *_binary(),
    *_casts(),
    *_misc(),
    *_reductions(),
    *_norms(),
    *_pooling(),
    *_cube(),
    *_layout(),
    *_pads_and_scatters(),
]


@pytest.mark.parametrize("case", CASES)
def test_op_matches_onnxruntime(case: Case) -> None:
    check(case)


def test_every_supported_op_has_a_case() -> None:
    assert {p.values[0].op for p in CASES} == SUPPORTED


@settings(max_examples=40, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
    op=st.sampled_from(["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Less", "Equal"]),
    seed=st.integers(0, 2**16),
)
def test_broadcasting_binary_ops(shapes: hnp.BroadcastableShapes, op: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = (np.asarray(rng.uniform(0.5, 2.0, s), np.float32) for s in shapes.input_shapes)
    if op == "Equal":
        a, b = np.asarray(np.round(a)), np.asarray(np.round(b))
    check(Case(op, (a, b)))


@settings(max_examples=25, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
    op=st.sampled_from(["Div", "Mod"]),
    seed=st.integers(0, 2**16),
)
def test_broadcasting_integer_div_and_mod(
    shapes: hnp.BroadcastableShapes, op: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    a = np.asarray(rng.integers(-50, 50, shapes.input_shapes[0]), np.int32)
    b = np.asarray(rng.choice(np.array([-7, -3, -1, 1, 2, 5]), shapes.input_shapes[1]), np.int32)
    check(Case(op, (a, b)))


_BOUND = st.one_of(
    st.integers(-7, 7), st.sampled_from([INT64_MIN, INT64_MAX, 2**31 - 1, -1000, 1000])
)


@st.composite
def slices(draw: st.DrawFn) -> Case:
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=3))
    axes = list({a % len(shape): a for a in axes}.values())  # each axis once
    k = len(axes)
    starts = draw(st.lists(_BOUND, min_size=k, max_size=k))
    ends = draw(st.lists(_BOUND, min_size=k, max_size=k))
    steps = draw(st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3]), min_size=k, max_size=k))
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    return Case("Slice", (data, i64(*starts), i64(*ends), i64(*axes), i64(*steps)))


@settings(max_examples=60, deadline=None)
@given(case=slices())
def test_slice_clamps_as_onnxruntime(case: Case) -> None:
    check(case)


def test_unknown_op_type_is_named() -> None:
    with pytest.raises(ExternError, match="'Frobnicate'"):
        extern_op("Frobnicate", {}, [torch.zeros(2)])
    with pytest.raises(ExternError, match="ReduceSum"):
        extern_op("ReduceSun", {}, [torch.zeros(2)])  # a near miss is suggested


def test_unsupported_attribute_names_op_and_attribute() -> None:
    with pytest.raises(ExternError, match=r"^Pad: attribute mode='mirror'"):
        extern_op("Pad", {"mode": "mirror"}, [torch.zeros(2), torch.zeros(2, dtype=torch.int64)])
    with pytest.raises(ExternError, match=r"^Cast: attribute to=8"):
        extern_op("Cast", {"to": 8}, [torch.zeros(2)])
    with pytest.raises(ExternError, match=r"^Dropout: input training_mode"):
        extern_op("Dropout", {}, [torch.zeros(2), torch.tensor(0.5), torch.tensor(True)])
    with pytest.raises(ExternError, match=r"^MaxPool: .*Indices"):
        extern_op("MaxPool", {"kernel_shape": [2]}, [torch.zeros(1, 1, 4)], 2)


@pytest.mark.parametrize(
    ("op", "extra"), [("Identity", []), ("Transpose", []), ("Reshape", [torch.tensor([3, 2])])]
)
def test_outputs_never_alias_inputs(op: str, extra: list[torch.Tensor]) -> None:
    x = torch.arange(6.0).reshape(2, 3)
    (out,) = extern_op(op, {}, [x, *extra])
    assert out.is_contiguous()
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_instance_norm_of_one_spatial_element_is_its_bias() -> None:
    # onnxruntime's own answer is off by ~1e-5 here (a variance of E[x^2] - E[x]^2); the
    # exact one is the bias: every element equals its mean
    x, scale, bias = (torch.randn(*s, generator=torch.Generator().manual_seed(0))
                      for s in ((2, 4, 1, 1), (4,), (4,)))  # fmt: skip
    (y,) = extern_op("InstanceNormalization", {}, [x, scale, bias])
    assert torch.equal(y, bias.view(1, 4, 1, 1).expand(2, 4, 1, 1))
