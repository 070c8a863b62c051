"""Every family a real row can name becomes a one-kernel model that computes what the op does
(onnxruntime against float64 numpy), and every cost model prices it: a row of any family is
either costed by every model to a positive, finite time or reported as an error, never 0."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from real_helpers import real_row
from scipy.special import erf

from costmodel.exceptions import MeasurementError
from costmodel.measure.real import KERNELS, family_of, one_kernel, parse_row
from costmodel.measure.real.evaluate import model_makers, predict_row
from costmodel.registry import make_cost_model

RNG = np.random.default_rng(7)


def _row(op: str, shapes: str, dtype: str = "fp32"):
    return real_row(op, shapes, dtype, chip="910B2", timing="device")


def _run(row, *arrays: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
    """The model's outputs, fed ``arrays`` in its input order, or ``named`` by input name."""
    model = one_kernel(row)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, named or dict(zip(names, arrays, strict=True)))


def _dims(shape: tuple[int, ...]) -> str:
    return ",".join(map(str, shape))


REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(sorted(REDUCE)),
    spelling=st.sampled_from(["Reduce{K}", "torch.{k}", "Reduce{K} (dim={d})"]),
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple),
    data=st.data(),
)
def test_every_reduction_reduces_its_axis(kind, spelling, shape, data) -> None:
    """ReduceSum, ReduceMean, ReduceMax and ReduceMin over the last axis or the one ``dim=``
    names (at opset 17 only ReduceSum takes its axes as an input)."""
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    op = spelling.format(K=kind.capitalize(), k=kind if kind != "max" else "amax", d=d)
    x = RNG.standard_normal(shape).astype(np.float32)
    (y,) = _run(_row(op, f"x=[{_dims(shape)}]"), x)
    axis = d if "dim=" in op else -1
    want = REDUCE[kind](x.astype(np.float64), axis=axis)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_softmax_normalises_the_axis_it_names(dim) -> None:
    x = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    op = "Softmax" if dim is None else f"Softmax (dim={dim})"
    (y,) = _run(_row(op, "x=[3,5,7]"), x)
    axis = -1 if dim is None else dim
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=axis, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "dtype", "src", "dst"),
    [
        ("Cast", "fp32", np.float32, np.float16),
        ("Cast", "fp16", np.float16, np.float32),
        ("Cast (fp32 to fp16)", "fp16", np.float32, np.float16),
        ("Cast (float16 -> float32)", "fp32", np.float16, np.float32),
    ],
)
def test_a_cast_reads_its_source_type_and_writes_its_target(op, dtype, src, dst) -> None:
    x = RNG.standard_normal((4, 6)).astype(src)
    (y,) = _run(_row(op, "x=[4,6]", dtype), x)
    assert y.dtype == dst
    np.testing.assert_array_equal(y, x.astype(dst))


def test_a_cast_to_its_own_type_is_an_error_not_a_free_kernel() -> None:
    row = _row("Cast (fp16 to fp16)", "x=[4,6]", "fp16")
    with pytest.raises(MeasurementError, match="same type"):
        one_kernel(row)
    pred = predict_row(row, model_makers(("analytic",), make_cost_model))
    assert pred.error and not pred.predicted


@pytest.mark.parametrize("fused", [False, True])
def test_layernorm_and_add_layernorm_normalise_the_last_axis(fused) -> None:
    x1, x2 = (RNG.standard_normal((2, 3, 16)).astype(np.float32) for _ in range(2))
    gamma, beta = (
        RNG.standard_normal(16).astype(np.float32),
        RNG.standard_normal(16).astype(np.float32),
    )
    if fused:
        y, s = _run(
            _row("AddLayerNorm", "x1=x2=[2,3,16], gamma=[16], beta=[16]"), x1, x2, gamma, beta
        )
        np.testing.assert_allclose(s, x1 + x2, rtol=1e-6)
        x = (x1 + x2).astype(np.float64)
    else:
        (y,) = _run(_row("LayerNorm", "x=[2,3,16], gamma=[16], beta=[16]"), x1, gamma, beta)
        x = x1.astype(np.float64)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(
        y, (x - mu) / np.sqrt(var + 1e-6) * gamma + beta, rtol=1e-4, atol=1e-5
    )


BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Maximum": np.maximum, "Minimum": np.minimum}  # fmt: skip


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_broadcast_as_numpy_does(op) -> None:
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    b = RNG.uniform(0.5, 2.0, 8).astype(np.float32)
    (y,) = _run(_row(op, "a=[4,8], b=[8]"), a, b)
    np.testing.assert_allclose(y, BINARY[op](a.astype(np.float64), b), rtol=1e-6, atol=1e-7)


UNARY = {
    "GELU": lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
    "SiLU": lambda x: x / (1 + np.exp(-x)),
    "Relu": lambda x: np.maximum(x, 0),
    "Exp": np.exp,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Neg": np.negative,
    "Sqrt": lambda x: np.sqrt(np.abs(x)),
    "Rsqrt": lambda x: 1 / np.sqrt(np.abs(x)),
    "Abs": np.abs,
    "Log": lambda x: np.log(np.abs(x)),
    "Erf": erf,
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_ops_compute_their_function(op) -> None:
    x = RNG.standard_normal((3, 10)).astype(np.float32)
    if op in {"Sqrt", "Rsqrt", "Log"}:
        x = np.abs(x) + 0.1
    (y,) = _run(_row(op, "x=[3,10]"), x)
    np.testing.assert_allclose(y, UNARY[op](x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_data_movement_ops_move_what_torch_would() -> None:
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    (y,) = _run(_row("Permute (perm=[0,2,1,3])", "x=[2,3,4,5]"), x)
    np.testing.assert_array_equal(y, x.transpose(0, 2, 1, 3))
    (y,) = _run(_row("Transpose", "x=[2,3,4,5]"), x)
    np.testing.assert_array_equal(y, x.swapaxes(-1, -2))
    table = RNG.standard_normal((50, 8)).astype(np.float32)
    ids = RNG.integers(0, 50, (2, 6)).astype(np.int64)
    (y,) = _run(_row("Embedding", "weight=[50,8], ids=[2,6]"), table=table, indices=ids)
    np.testing.assert_array_equal(y, table[ids])
    a, b = (
        RNG.standard_normal((3, 4)).astype(np.float32),
        RNG.standard_normal((3, 2)).astype(np.float32),
    )
    (y,) = _run(_row("cat", "a=[3,4], b=[3,2]"), a, b)
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=-1))


def test_transdata_lays_a_matrix_out_in_nz_blocks() -> None:
    """CANN's TransData ND -> NZ: block (i, j) of 16 x 16 at [j, i]; msprof shows
    [8192, 155136] in and [9696, 512, 16, 16] out."""
    x = RNG.standard_normal((2, 32, 48)).astype(np.float32)
    (y,) = _run(_row("TransData (aclnnMatmul_TransData_TransData)", "x=[2,32,48]"), x)
    assert y.shape == (2, 3, 2, 16, 16)
    for i in range(2):
        for j in range(3):
            block = x[:, i * 16 : (i + 1) * 16, j * 16 : (j + 1) * 16]
            np.testing.assert_array_equal(y[:, j, i], block)


def test_msprof_matmul_operands_read_as_m_k_and_n_k() -> None:
    """kernel_details write a linear layer's operands as [M, K] and [N, K]."""
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    b = RNG.standard_normal((5, 6)).astype(np.float32)
    (y,) = _run(_row("MatMul", '"4,6;5,6"'), x=a, W=b)
    np.testing.assert_allclose(y, a.astype(np.float64) @ b.T.astype(np.float64), rtol=1e-5)


def test_bsh_attention_splits_h_into_heads_of_head_dim() -> None:
    row = _row(
        "npu_fused_infer_attention_score", "q=[1,128,256] k=v=[1,512,256] (BSH, head_dim=128)"
    )
    model = one_kernel(row)
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert dims["q"] == [1, 2, 128, 128] and dims["k"] == [1, 2, 512, 128]
    with pytest.raises(MeasurementError, match="head_dim"):
        one_kernel(_row("FlashAttention", "q=[1,128,256] k=v=[1,512,256] (BSH)"))


@pytest.mark.parametrize("op", ["SwiGluGrad", "RmsNormGrad", "add_rms_norm_backward"])
def test_gradient_ops_are_not_taken_for_their_forward_op(op: str) -> None:
    with pytest.raises(MeasurementError, match="gradient"):
        family_of(op)


def test_gemv_and_addmv_multiply_a_matrix_by_a_vector() -> None:
    m = RNG.standard_normal((6, 9)).astype(np.float32)
    v, bias = RNG.standard_normal(9).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
    (y,) = _run(_row("mv", "A=[6,9], x=[9]"), A=m, x=v.reshape(9, 1))
    np.testing.assert_allclose(y, m.astype(np.float64) @ v, rtol=1e-5, atol=1e-5)
    (y,) = _run(_row("addmv", "A=[6,9], x=[9], b=[6]"), A=m, x=v.reshape(9, 1), bias=bias)
    np.testing.assert_allclose(y, bias + m.astype(np.float64) @ v, rtol=1e-5, atol=1e-5)


# one row per family the loader knows, small enough for the simulator
EVERY_FAMILY = [
    ("RmsNorm", "x=[64,768], gamma=[768]"),
    ("AddRmsNorm", "x1=x2=[64,768], gamma=[768]"),
    ("LayerNorm", "x=[64,768], gamma=[768], beta=[768]"),
    ("AddLayerNorm", "x1=x2=[64,768], gamma=[768], beta=[768]"),
    ("SwiGlu", "x=[64,2048]"),
    ("RotaryMul", "x=[1,64,8,64], cos=sin=[1,64,1,64]"),
    ("FlashAttention (causal)", "q=k=v=[1,4,128,64]"),
    ("IncreFlashAttention", "q=[1,8,1,64], k=v=[1,8,512,64]"),
    ("MatMul", "a=[128,256], b=[256,512]"),
    ("addmv", "A=[256,256], x=[256], b=[256]"),
    ("Softmax", "x=[64,1000]"),
    ("ReduceMean (dim=0)", "x=[64,1000]"),
    ("ReduceMax", "x=[64,1000]"),
    ("ReduceSum", "x=[1048576]"),
    ("Embedding", "weight=[32000,512], ids=[64]"),
    ("Transpose", "x=[8,64,256]"),
    ("TransData", "x=[256,512]"),
    ("Concat", "x0=[64,768], x1=[64,768]"),
    ("Cast (fp32 to fp16)", "x=[64,768]"),
    ("Add", "a=[64,768], b=[768]"),
    ("GELU", "x=[64,768]"),
]


def test_the_family_table_has_a_row_here_for_every_family() -> None:
    assert {family_of(op) for op, _ in EVERY_FAMILY} == set(KERNELS)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_every_model_prices_every_family_at_a_positive_finite_time(dtype) -> None:
    makers = model_makers(("simulator", "analytic", "learned"), make_cost_model)
    for op, shapes in EVERY_FAMILY:
        pred = predict_row(_row(op, shapes, dtype), makers)
        assert not pred.error, (op, pred.error)
        assert pred.kernels >= 1, op
        for name, us in pred.predicted.items():
            assert math.isfinite(us) and us > 0, (op, name, us)


@pytest.mark.parametrize(
    ("op", "loose", "named"),
    [
        ("MatMul", "M=256, N=128, K=64", "a=[256,64], b=[64,128]"),
        ("bmm", "B=4, M=32, N=16, K=8", "a=[4,32,8], b=[4,8,16]"),
        ("MatMul", "[256,64] x [64,128]", "a=[256,64], b=[64,128]"),
        ("FlashAttention", "B=2, N=8, S=128, D=64", "q=k=v=[2,8,128,64]"),
        ("IncreFlashAttention", "B=1, N=32, NKV=8, S=1, T=512, D=128",
         "q=[1,32,1,128], k=v=[1,8,512,128]"),
        ("Softmax", "(64, 1000)", "x=[64,1000]"),
        ("ReduceSum", "64M", "x=[67108864]"),
        ("ReduceSum", "x: [4096, 4096]", "x=[4096,4096]"),
        ("Add", "[1024,1024] + [1024]", "a=[1024,1024], b=[1024]"),
        ("ReduceSum", "X=[4096]", "x=[4096]"),  # a one-letter name is a name, not an op dim
        ("addmv", "A=[64,32], X=[32], B=[64]", "A=[64,32], x=[32], b=[64]"),
        ("SwiGlu", '"64,2048"', "x=[64,2048]"),  # msprof's kernel_details
        ("Add", '"1024,1024;1024"', "a=[1024,1024], b=[1024]"),
        ("Subs", '"8165,1;"', "x=[8165,1]"),  # the empty entry: the scalar
        ("MatMul", '"256,2048;4096,2048" (decode)', "a=[256,2048], b=[4096,2048]"),
    ],
)  # fmt: skip
def test_shapes_written_without_names_or_as_op_dims_read_as_the_named_form(
    op: str, loose: str, named: str
) -> None:
    """Sources that write bare shapes, ``name: [..]`` or the op's dims (``M=, N=, K=``;
    ``B=, N=, S=, D=``) give the row the inputs the named form does, and the same costs."""
    a, b = _row(op, loose, "fp16"), _row(op, named, "fp16")
    assert list(a.tensors.values()) == list(b.tensors.values())
    makers = model_makers(("analytic",), make_cost_model)
    assert predict_row(a, makers).predicted == predict_row(b, makers).predicted


def test_op_dims_a_family_cannot_place_are_one_clear_error() -> None:
    with pytest.raises(MeasurementError, match="take their input shapes"):
        _row("RmsNorm", "B=32, H=4096")
    with pytest.raises(MeasurementError, match="no input shape"):
        _row("Softmax", "about a megabyte")


@pytest.mark.parametrize(
    ("chip", "spec"),
    [("Atlas 800T A2", "ascend910b"), ("Atlas 800I A2", "ascend910b"),
     ("Ascend910B3", "ascend910b3"), ("910B4 (32 GB)", "ascend910b4"),
     ("Ascend A3 (910_93)", "ascend910b"), ("Atlas A2/A3 (SKU unstated)", "ascend910b")],
)  # fmt: skip
def test_chip_names_as_servers_and_sources_write_them(chip: str, spec: str) -> None:
    row = parse_row(1, "t.csv", {"chip": chip, "op": "Add", "shapes": "a=[8], b=[8]",
                                 "dtype": "fp16", "time_us": "3"})  # fmt: skip
    assert row.target == spec


@pytest.mark.parametrize(
    ("op", "family"),
    [("FastGeluV2", "unary"), ("npu_fast_gelu", "unary"), ("aclnnSilu", "unary"),
     ("Square", "unary"), ("aclnnAdd", "binary"), ("RealDiv", "binary"), ("Muls", "binary"),
     ("ElementwiseAdd", "binary"), ("ArgMaxV2", "reduce"), ("ReduceSumD", "reduce"),
     ("SoftmaxV2", "softmax"), ("LayerNormV3", "layernorm"), ("GatherV2", "gather"),
     ("BatchMatMulV2", "matmul")],
)  # fmt: skip
def test_cann_and_torch_npu_spellings_name_their_family(op: str, family: str) -> None:
    """CANN's and torch_npu's affixes (Fast, V2, D, aclnn, npu_, Real) around an op's name."""
    assert family_of(op) == family


@pytest.mark.parametrize("op", ["MaxPool", "AvgPool", "Conv2D", "GroupNorm"])
def test_ops_without_a_template_stay_unknown(op: str) -> None:
    """A max-pool is not a ReduceMax: an op the tool has no one-kernel model for is reported."""
    with pytest.raises(MeasurementError, match="unknown op"):
        family_of(op)


def test_a_binary_op_of_one_input_shape_takes_a_scalar() -> None:
    """CANN's Muls: the one tensor times a scalar, read once (not squared)."""
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    (y,) = _run(_row("Muls", "x=[4,8]"), x)
    np.testing.assert_allclose(y, x.astype(np.float64) * 0.5, rtol=1e-6)
    model = one_kernel(_row("Muls", "x=[4,8]"))
    assert [i.name for i in model.graph.input] == ["a"]
