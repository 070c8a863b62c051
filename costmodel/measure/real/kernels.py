"""A real row as a one-kernel ONNX model: the op, or the chain of ops the real kernel fuses
(RMSNorm, Add+RMSNorm, SwiGLU, attention), written the way exporters write them, in the row's
dtype, with weights (a linear layer's matrix, a norm's scale) as shape-only weight inputs.
One-op kernels (softmax, reductions, elementwise, casts, data movement) are in :mod:`.ops`.

The whole chain is one fusion group: :func:`one_kernel` returns the model and the ops of that
group, so a cost model costs exactly what the real kernel does in one launch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from costmodel.exceptions import MeasurementError
from costmodel.measure.real.graph import OnnxWriter, dims_of
from costmodel.measure.real.ops import (
    binary,
    cast,
    concat,
    gather,
    reduce,
    softmax,
    transdata,
    transpose,
    unary,
)
from costmodel.measure.real.rows import RealRow

__all__ = ["KERNELS", "one_kernel"]

EPS = 1e-6  # the norms' epsilon
_B_FRACTAL = re.compile(r"\bB\s+(?:zN|nZ)\b")  # a GEMM's B stored in the cube's NZ fractals


def _rmsnorm(g: OnnxWriter, x: str, hidden: int, prefix: str = "rms") -> str:
    """x * 1/sqrt(mean(x^2) + eps) * gamma, as exporters write Llama's RMSNorm."""
    gamma = g.weight("gamma", [hidden])
    sq = g.op("Pow", [x, g.const("two", 2.0)], f"{prefix}/Pow")
    ms = g.op("ReduceMean", [sq], f"{prefix}/ReduceMean", axes=[-1], keepdims=1)
    std = g.op("Sqrt", [g.op("Add", [ms, g.const("eps", EPS)], f"{prefix}/Add")], f"{prefix}/Sqrt")
    r = g.op("Reciprocal", [std], f"{prefix}/Reciprocal")
    return g.op("Mul", [gamma, g.op("Mul", [x, r], f"{prefix}/Mul")], f"{prefix}/Mul_1")


def rmsnorm(row: RealRow, g: OnnxWriter) -> list[str]:
    (x,) = dims_of(row, "x", count=1)
    return [_rmsnorm(g, g.input("x", x), x[-1])]


def add_rmsnorm(row: RealRow, g: OnnxWriter) -> list[str]:
    x1, x2 = dims_of(row, "x1", "x2", count=2)
    s = g.op("Add", [g.input("x1", x1), g.input("x2", x2)], "add/Add")
    return [_rmsnorm(g, s, x1[-1]), s]


def layernorm(row: RealRow, g: OnnxWriter) -> list[str]:
    (x,) = dims_of(row, "x", count=1)
    h = x[-1]
    return [
        g.op(
            "LayerNormalization",
            [g.input("x", x), g.weight("gamma", [h]), g.weight("beta", [h])],
            "ln/LayerNormalization",
            axis=-1,
            epsilon=EPS,
        )
    ]


def add_layernorm(row: RealRow, g: OnnxWriter) -> list[str]:
    x1, x2 = dims_of(row, "x1", "x2", count=2)
    s = g.op("Add", [g.input("x1", x1), g.input("x2", x2)], "add/Add")
    h = x1[-1]
    y = g.op(
        "LayerNormalization",
        [s, g.weight("gamma", [h]), g.weight("beta", [h])],
        "ln/LayerNormalization",
        axis=-1,
        epsilon=EPS,
    )
    return [y, s]


def swiglu(row: RealRow, g: OnnxWriter) -> list[str]:
    """silu(gate) * up on the two halves of one fused input (npu_swiglu's form)."""
    lower = {k.lower() for k in row.tensors}
    if {"gate", "up"} <= lower:
        half = dims_of(row, "gate", count=1)[0]
        fused = (*half[:-1], 2 * half[-1])
    else:
        fused = dims_of(row, "x", count=1)[0]
        if fused[-1] % 2:
            raise MeasurementError(f"swiglu's fused input {list(fused)} has an odd last dim")
    x = g.input("x", fused)
    gate_up = [f"split/Split_out_{i}" for i in range(2)]
    halves = g.const("split", np.array([fused[-1] // 2] * 2, dtype=np.int64))
    g.nodes.append(helper.make_node("Split", [x, halves], gate_up, name="split/Split", axis=-1))
    silu = g.op("Mul", [gate_up[0], g.op("Sigmoid", [gate_up[0]], "act/Sigmoid")], "act/Mul")
    return [g.op("Mul", [silu, gate_up[1]], "mul/Mul")]


def rope(row: RealRow, g: OnnxWriter) -> list[str]:
    """x * cos + rotate_half(x) * sin (NeoX split-half), as exporters write rotary embeddings:
    Slice, Neg, Concat, Mul, Add; cos/sin broadcast over batch and heads. When the row's cos
    names half of the head dim (``(S, D/2)`` tables, as kernels that keep one angle per pair
    read them), each half is rotated against the half tables and the halves concatenated:
    ``[x1 c - x2 s, x2 c + x1 s]``, the same result with half the table bytes."""
    (x,) = dims_of(row, "x", count=1)
    d = x[-1]
    if d % 2:
        raise MeasurementError(f"rope's last dim {d} is odd")
    half = d // 2
    cos = {k.lower(): v for k, v in row.tensors.items()}.get("cos")
    xn = g.input("x", x)
    axis = g.const("axis", np.array([-1], dtype=np.int64))

    def part(lo: int, hi: int, name: str) -> str:
        bounds = [
            g.const(f"{name}_lo", np.array([lo], dtype=np.int64)),
            g.const(f"{name}_hi", np.array([hi], dtype=np.int64)),
        ]
        return g.op("Slice", [xn, *bounds, axis], name)

    x1, x2 = part(0, half, "rope/Slice"), part(half, d, "rope/Slice_1")
    halved = cos is not None and cos[-1] == half
    width = half if halved else d
    table: tuple[int, ...] = (
        (1, x[1], 1, width) if len(x) == 4 else (x[-2], width) if len(x) >= 2 else (width,)
    )
    if halved:
        c, s = g.input("cos", table), g.input("sin", table)

        def mul(a: str, b: str, name: str) -> str:
            return g.op("Mul", [a, b], f"rope/{name}")

        y1 = g.op("Sub", [mul(x1, c, "Mul"), mul(x2, s, "Mul_1")], "rope/Sub")
        y2 = g.op("Add", [mul(x2, c, "Mul_2"), mul(x1, s, "Mul_3")], "rope/Add")
        return [g.op("Concat", [y1, y2], "rope/Concat", axis=-1)]
    rot = g.op("Concat", [g.op("Neg", [x2], "rope/Neg"), x1], "rope/Concat", axis=-1)
    a = g.op("Mul", [xn, g.input("cos", table)], "rope/Mul")
    b = g.op("Mul", [rot, g.input("sin", table)], "rope/Mul_1")
    return [g.op("Add", [a, b], "rope/Add")]


def attention(row: RealRow, g: OnnxWriter) -> list[str]:
    """softmax(Q K^T / sqrt(d) (+ causal mask)) V on [B,N,S,D] operands (BSND transposed)."""
    q, k, v = dims_of(row, "q", "k", "v", count=3)
    text = f"{row.shapes} {row.op} {row.notes}".lower()
    bsnd = "bsnd" in text
    if bsnd:
        q, k, v = ((s[0], s[2], s[1], s[3]) for s in (q, k, v))
    if len(q) == len(k) == len(v) == 3:  # BSH: H holds the heads of head_dim each
        q, k, v = (_heads(s, row) for s in (q, k, v))
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise MeasurementError("attention needs 4-D q, k, v ([B,N,S,D])")
    qn, kn, vn = g.input("q", q), g.input("k", k), g.input("v", v)
    if k[1] != q[1]:  # grouped-query: repeat K/V heads
        rep = q[1] // k[1]
        expand = g.const("rep", np.array([1, rep, 1, 1], dtype=np.int64))
        kn = g.op("Tile", [kn, expand], "gqa/Tile_k")
        vn = g.op("Tile", [vn, expand], "gqa/Tile_v")
    kt = g.op("Transpose", [kn], "attn/Transpose", perm=[0, 1, 3, 2])
    s = g.op("MatMul", [qn, kt], "attn/MatMul")
    s = g.op("Div", [s, g.const("sqrt_d", math.sqrt(q[-1]))], "attn/Div")
    if "causal" in (row.op + row.notes).lower():
        sq, sk = q[2], k[2]
        mask = np.triu(np.full((sq, sk), -1e4 if g.elem != TensorProto.FLOAT else -1e9), 1)
        s = g.op("Add", [s, g.const("causal_mask", mask.astype(np.float32))], "attn/Add")
    p = g.op("Softmax", [s], "attn/Softmax", axis=-1)
    return [g.op("MatMul", [p, vn], "attn/MatMul_1")]


def _heads(bsh: tuple[int, ...], row: RealRow) -> tuple[int, ...]:
    """A ``[B, S, H]`` operand as ``[B, N, S, D]``, D the ``head_dim`` the row names.

    Raises:
        MeasurementError: no head_dim, or one that does not divide H.
    """
    m = re.search(r"head_dim\s*=\s*(\d+)", f"{row.shapes} {row.notes}")
    d = int(m.group(1)) if m else 0
    b, s, h = bsh
    if not d or h % d:
        raise MeasurementError(f"a BSH attention of H={h} needs a head_dim= dividing it")
    return (b, h // d, s, d)


def matmul(row: RealRow, g: OnnxWriter) -> list[str]:
    """``linear`` (y = x W^T, W a weight) or ``mm``/``bmm`` (both operands activations)."""
    a, b = dims_of(row, count=2)
    text = row.op.lower()
    # msprof's kernel_details write a linear layer's operands as [M, K] and its weight [N, K]
    weight_nk = len(b) == 2 and a[-1] == b[-1] != b[-2]
    if "linear" in text or "w^t" in text or "gemm" in text or weight_nk:
        x = g.input("x", a)
        w = g.weight("W", b)
        if b[-1] == a[-1] and (len(b) == 2):  # [N, K]: stored transposed, as torch does
            wt = g.op("Transpose", [w], "linear/Transpose", perm=[1, 0])
            return [g.op("MatMul", [x, wt], "linear/MatMul")]
        return [g.op("MatMul", [x, w], "linear/MatMul")]
    # a B given in the cube's fractal layout (catlass's ``B zN``) is read as a weight is: in
    # NZ blocks, no ND->NZ conversion on the way in
    fractal = _B_FRACTAL.search(row.shapes) is not None
    b_in = g.weight("b", b) if fractal else g.input("b", b)
    return [g.op("MatMul", [g.input("a", a), b_in], "mm/MatMul")]


def gemv(row: RealRow, g: OnnxWriter) -> list[str]:
    """y = b + A x (``torch.addmv``), or A x (``mv``)."""
    dims = list(row.tensors.items())
    a = next((d for n, d in dims if len(d) == 2), None)
    vec = [d for n, d in dims if len(d) == 1]
    if a is None or not vec:
        raise MeasurementError("gemv needs a 2-D matrix and a 1-D vector")
    x = g.input("x", [a[1], 1])
    y = g.op("MatMul", [g.input("A", a), x], "mv/MatMul")
    y = g.op("Reshape", [y, g.const("shape", np.array([a[0]], dtype=np.int64))], "mv/Reshape")
    if len(vec) >= 2 or "addmv" in row.op.lower():
        y = g.op("Add", [g.input("bias", [a[0]]), y], "mv/Add")
    return [y]


KERNELS: dict[str, Callable[[RealRow, OnnxWriter], list[str]]] = {
    "rmsnorm": rmsnorm,
    "add_rmsnorm": add_rmsnorm,
    "layernorm": layernorm,
    "add_layernorm": add_layernorm,
    "swiglu": swiglu,
    "rope": rope,
    "attention": attention,
    "matmul": matmul,
    "gemv": gemv,
    "softmax": softmax,
    "reduce": reduce,
    "binary": binary,
    "unary": unary,
    "cast": cast,
    "transdata": transdata,
    "transpose": transpose,
    "gather": gather,
    "concat": concat,
}


def one_kernel(row: RealRow) -> onnx.ModelProto:
    """The row's kernel as an ONNX model whose compute ops form one fusion group.

    Raises:
        MeasurementError: the row's shapes do not fit its family.
    """
    if row.family not in KERNELS:
        raise MeasurementError(f"no one-kernel model for family {row.family!r}")
    g = OnnxWriter(row.dtype)
    outputs = KERNELS[row.family](row, g)
    return g.model(outputs)
