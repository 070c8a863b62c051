"""One-op kernels of real rows: softmax, reductions, elementwise, casts and data movement,
each as an exporter writes it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
from onnx import TensorProto

from costmodel.exceptions import MeasurementError
from costmodel.measure.real.graph import OnnxWriter, dims_of
from costmodel.measure.real.rows import RealRow

__all__ = [
    "binary",
    "cast",
    "concat",
    "gather",
    "reduce",
    "softmax",
    "transdata",
    "transpose",
    "unary",
]


def _axis(row: RealRow) -> int:
    """The axis ``dim=`` in the op column names (the last one when it names none)."""
    m = re.search(r"dim\s*=\s*(-?\d+)", row.op.lower())
    return int(m.group(1)) if m else -1


def softmax(row: RealRow, g: OnnxWriter) -> list[str]:
    """Softmax over the last axis, or the one ``dim=`` names."""
    (x,) = dims_of(row, "x", count=1)
    return [g.op("Softmax", [g.input("x", x)], "softmax/Softmax", axis=_axis(row))]


def reduce(row: RealRow, g: OnnxWriter) -> list[str]:
    """ReduceSum / Mean / Max over the last axis (``dim=`` in the op column picks another;
    a 1-D input reduces to one value). ``Max``/``Min`` of two inputs is the elementwise op."""
    if len(row.tensors) >= 2:
        return binary(row, g)
    (x,) = dims_of(row, "x", count=1)
    text = row.op.lower()
    kind = "ReduceMax" if "max" in text else "ReduceMean" if "mean" in text else "ReduceSum"
    if "min" in text and "max" not in text:
        kind = "ReduceMin"
    axis = _axis(row)
    xn = g.input("x", x)
    if kind == "ReduceSum":  # at opset 17 only ReduceSum takes its axes as an input
        axes = g.const("axes", np.array([axis], dtype=np.int64))
        return [g.op(kind, [xn, axes], f"reduce/{kind}", keepdims=0)]
    return [g.op(kind, [xn], f"reduce/{kind}", axes=[axis], keepdims=0)]


def binary(row: RealRow, g: OnnxWriter) -> list[str]:
    """An elementwise op of two inputs, as numpy broadcasts them; with one input shape (CANN's
    Muls, Adds...) the other operand is a scalar."""
    dims = list(row.tensors.values())
    text = row.op.lower()
    kind = next(
        (
            k
            for w, k in (
                ("sub", "Sub"),
                ("mul", "Mul"),
                ("div", "Div"),
                ("max", "Max"),
                ("min", "Min"),
            )
            if w in text
        ),
        "Add",
    )
    a = g.input("a", dims[0])
    b = g.input("b", dims[1]) if len(dims) > 1 else g.const("scalar", 0.5)
    return [g.op(kind, [a, b], f"binary/{kind}")]


def _gelu(g: OnnxWriter, x: str) -> str:
    """Exact GELU as exported: x * (1 + erf(x / sqrt 2)) * 0.5."""
    e = g.op("Erf", [g.op("Div", [x, g.const("sqrt2", math.sqrt(2.0))], "gelu/Div")], "gelu/Erf")
    y = g.op("Mul", [x, g.op("Add", [e, g.const("one", 1.0)], "gelu/Add")], "gelu/Mul")
    return g.op("Mul", [y, g.const("half", 0.5)], "gelu/Mul_1")


_UNARY: dict[str, Callable[[OnnxWriter, str], str]] = {
    "gelu": _gelu,
    "silu": lambda g, x: g.op("Mul", [x, g.op("Sigmoid", [x], "silu/Sigmoid")], "silu/Mul"),
    "swish": lambda g, x: g.op("Mul", [x, g.op("Sigmoid", [x], "silu/Sigmoid")], "silu/Mul"),
    "relu": lambda g, x: g.op("Relu", [x], "unary/Relu"),
    "exp": lambda g, x: g.op("Exp", [x], "unary/Exp"),
    "sigmoid": lambda g, x: g.op("Sigmoid", [x], "unary/Sigmoid"),
    "tanh": lambda g, x: g.op("Tanh", [x], "unary/Tanh"),
    "neg": lambda g, x: g.op("Neg", [x], "unary/Neg"),
    "rsqrt": lambda g, x: g.op(
        "Reciprocal", [g.op("Sqrt", [x], "unary/Sqrt")], "unary/Reciprocal"
    ),
    "sqrt": lambda g, x: g.op("Sqrt", [x], "unary/Sqrt"),
    "abs": lambda g, x: g.op("Abs", [x], "unary/Abs"),
    "log": lambda g, x: g.op("Log", [x], "unary/Log"),
    "erf": lambda g, x: g.op("Erf", [x], "unary/Erf"),
    "square": lambda g, x: g.op("Mul", [x, x], "unary/Square"),
}


def unary(row: RealRow, g: OnnxWriter) -> list[str]:
    (x,) = dims_of(row, "x", count=1)
    text = row.op.lower()
    key = next((k for k in _UNARY if k in text), None)
    if key is None:
        raise MeasurementError(f"unknown unary op {row.op!r}; known: {', '.join(_UNARY)}")
    return [_UNARY[key](g, g.input("x", x))]


_FLOATS = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16, "fp32": TensorProto.FLOAT}


def cast(row: RealRow, g: OnnxWriter) -> list[str]:
    """A cast between float widths: ``<from> to <to>`` (or ``->``) in the op column or the
    notes names them; without a source the row's dtype is the input's, and without a target
    it casts to the other width (fp32 <-> fp16).

    Raises:
        MeasurementError: the cast names the same type on both sides (no kernel runs).
    """
    (x,) = dims_of(row, "x", count=1)
    text = (row.op + " " + row.notes).lower().replace("float16", "fp16").replace("float32", "fp32")
    text = text.replace("bfloat16", "bf16").replace("->", " to ")
    pair = re.search(r"(fp16|bf16|fp32)?\s*to\s+(fp16|bf16|fp32)", text)
    src = _FLOATS[pair.group(1)] if pair and pair.group(1) else g.elem
    to = _FLOATS[pair.group(2)] if pair else None
    if to is None:
        to = TensorProto.FLOAT if src != TensorProto.FLOAT else TensorProto.FLOAT16
    if to == src:
        raise MeasurementError(f"cast {row.op!r} has the same type on both sides; name another")
    return [g.op("Cast", [g.input("x", x, src)], "cast/Cast", to=to)]


def transpose(row: RealRow, g: OnnxWriter) -> list[str]:
    (x,) = dims_of(row, "x", count=1)
    m = re.search(r"perm\s*=\s*\[([\d,\s]+)\]", row.op + " " + row.notes)
    perm = (
        [int(p) for p in m.group(1).split(",")]
        if m
        else [*range(len(x) - 2), len(x) - 1, len(x) - 2]
    )
    return [g.op("Transpose", [g.input("x", x)], "transpose/Transpose", perm=perm)]


FRACTAL = 16  # the side of a fractal block (NZ layout) of a 16-bit type


def transdata(row: RealRow, g: OnnxWriter) -> list[str]:
    """CANN's TransData from ND to the cube's NZ layout: a ``[.., M, N]`` matrix as
    ``[.., N/16, M/16, 16, 16]`` blocks (what msprof shows as its output), written as exporters
    would: a Reshape into blocks and a Transpose that moves the column blocks outward.

    Raises:
        MeasurementError: a matrix side that is not a whole number of blocks.
    """
    (x,) = dims_of(row, "x", count=1)
    if len(x) < 2 or x[-1] % FRACTAL or x[-2] % FRACTAL:
        raise MeasurementError(
            f"TransData of {list(x)}: the last two dims must be multiples of 16"
        )
    lead, (m, n) = list(x[:-2]), x[-2:]
    blocks = [*lead, m // FRACTAL, FRACTAL, n // FRACTAL, FRACTAL]
    shape = g.const("blocks", np.array(blocks, dtype=np.int64))
    tiled = g.op("Reshape", [g.input("x", x), shape], "transdata/Reshape")
    r = len(lead)
    perm = [*range(r), r + 2, r, r + 1, r + 3]
    return [g.op("Transpose", [tiled], "transdata/Transpose", perm=perm)]


def gather(row: RealRow, g: OnnxWriter) -> list[str]:
    dims = list(row.tensors.items())
    table = next((d for n, d in dims if len(d) == 2), dims[0][1])
    idx = next((d for n, d in dims if d is not table), (1,))
    ids = g.input("indices", idx, TensorProto.INT64)
    return [g.op("Gather", [g.input("table", table), ids], "gather/Gather", axis=0)]


def concat(row: RealRow, g: OnnxWriter) -> list[str]:
    names = [g.input(f"x{i}", d) for i, d in enumerate(row.tensors.values())]
    return [g.op("Concat", names, "concat/Concat", axis=-1)]
