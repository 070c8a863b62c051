"""One small numpy function per op type over a shared base (the onnx reference style).

Every kernel receives an :class:`OpCall` (the node's attributes, the format it computes in,
the kernel's :class:`Numerics`) and its input arrays; it returns its outputs. Float inputs are
read through :meth:`OpCall.f`, which rounds them to the op's format (compile-time constants
saturate, as an offline conversion would) and hands back float64 for the exact computation;
:meth:`OpCall.out` rounds the result once. Layout ops move data and never round. The cube ops
(MatMul, Gemm, Conv) live in :mod:`.cube` and register here too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from scipy import special

from autotune.verify.numerics import Numerics, f64, is_float, rnd

__all__ = ["KERNELS", "OpCall", "kernel"]

Arr = np.ndarray
Kernel = Callable[["OpCall", list[Any]], list[Arr]]
KERNELS: dict[str, Kernel] = {}


@dataclass
class OpCall:
    """What a kernel needs besides its inputs."""

    node: onnx.NodeProto
    attrs: dict[str, Any]
    fmt: str
    num: Numerics
    opset: int
    unit: str = "vector"
    const_inputs: tuple[bool, ...] = ()
    base_k: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def f(self, x: Arr, pos: int = 0, fmt: str | None = None) -> Arr:
        """Input ``pos`` rounded to the op's format, as float64."""
        sat = pos < len(self.const_inputs) and self.const_inputs[pos]
        return f64(rnd(x, fmt or self.fmt, saturate=sat))

    def out(self, y: Any, fmt: str | None = None) -> Arr:
        return rnd(y, fmt or self.fmt)


def kernel(*op_types: str) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for t in op_types:
            KERNELS[t] = fn
        return fn

    return register


def _ints(x: Any) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1)]


def input_at(ins: Sequence[Any], pos: int) -> Any:
    return ins[pos] if len(ins) > pos else None


# -- elementwise ------------------------------------------------------------------------------
def _hard_sigmoid(x: Arr, alpha: float, beta: float) -> Arr:
    return np.clip(alpha * x + beta, 0.0, 1.0)


_UNARY: dict[str, Callable[[OpCall, Arr], Arr]] = {
    "Sqrt": lambda c, x: np.sqrt(x),
    "Reciprocal": lambda c, x: 1.0 / x,
    "Neg": lambda c, x: -x,
    "Abs": lambda c, x: np.abs(x),
    "Exp": lambda c, x: np.exp(x),
    "Log": lambda c, x: np.log(x),
    "Erf": lambda c, x: special.erf(x),
    "Tanh": lambda c, x: np.tanh(x),
    "Sigmoid": lambda c, x: special.expit(x),
    "Relu": lambda c, x: np.maximum(x, 0.0),
    "LeakyRelu": lambda c, x: np.where(x >= 0, x, c.attr("alpha", 0.01) * x),
    "HardSigmoid": lambda c, x: _hard_sigmoid(x, c.attr("alpha", 0.2), c.attr("beta", 0.5)),
    "HardSwish": lambda c, x: x * _hard_sigmoid(x, 1.0 / 6.0, 0.5),
    "Softplus": lambda c, x: np.logaddexp(0.0, x),
    "Floor": lambda c, x: np.floor(x),
    "Ceil": lambda c, x: np.ceil(x),
    "Sin": lambda c, x: np.sin(x),
    "Cos": lambda c, x: np.cos(x),
    "Gelu": lambda c, x: (
        0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        if c.attr("approximate", "none") == "tanh"
        else 0.5 * x * (1 + special.erf(x / np.sqrt(2)))
    ),
}


@kernel(*_UNARY)
def _unary(c: OpCall, ins: list[Any]) -> list[Arr]:
    with np.errstate(all="ignore"):
        return [c.out(_UNARY[c.node.op_type](c, c.f(ins[0])))]


_BINARY: dict[str, Callable[[Arr, Arr], Arr]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Pow": np.power,
    "Max": np.maximum,
    "Min": np.minimum,
}


@kernel(*_BINARY)
def _binary(c: OpCall, ins: list[Any]) -> list[Arr]:
    fn = _BINARY[c.node.op_type]
    if not any(is_float(np.asarray(x)) for x in ins):  # integer index arithmetic
        out = np.asarray(ins[0])
        for x in ins[1:]:
            out = fn(out, x) if c.node.op_type != "Div" else out // x
        return [np.asarray(out)]
    if c.node.op_type == "Pow" and not is_float(np.asarray(ins[1])):
        with np.errstate(all="ignore"):
            return [c.out(np.power(c.f(ins[0]), f64(ins[1])))]
    vals = [c.f(x, i) for i, x in enumerate(ins)]
    out = vals[0]
    with np.errstate(all="ignore"):
        for v in vals[1:]:
            out = f64(c.out(fn(out, v)))
    return [c.out(out)]


@kernel("Clip")
def _clip(c: OpCall, ins: list[Any]) -> list[Arr]:
    lo, hi = input_at(ins, 1), input_at(ins, 2)
    lo = c.attr("min", -np.inf) if lo is None else float(np.asarray(lo))
    hi = c.attr("max", np.inf) if hi is None else float(np.asarray(hi))
    return [c.out(np.clip(c.f(ins[0]), lo, hi))]


@kernel("Where")
def _where(c: OpCall, ins: list[Any]) -> list[Arr]:
    cond, a, b = (np.asarray(x) for x in ins)
    if not (is_float(a) or is_float(b)):
        return [np.where(cond.astype(bool), a, b)]
    return [c.out(np.where(cond.astype(bool), c.f(a, 1), c.f(b, 2)))]


_COMPARE: dict[str, Callable[[Arr, Arr], Arr]] = {
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
}


@kernel(*_COMPARE)
def _compare(c: OpCall, ins: list[Any]) -> list[Arr]:
    a, b = (c.f(x, i) if is_float(np.asarray(x)) else np.asarray(x) for i, x in enumerate(ins))
    return [_COMPARE[c.node.op_type](a, b)]


@kernel("Not", "IsNaN", "IsInf")
def _predicate(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    if c.node.op_type == "Not":
        return [np.logical_not(x)]
    v = c.f(x) if is_float(x) else x
    return [np.isnan(v) if c.node.op_type == "IsNaN" else np.isinf(v)]


_ONNX_FLOAT: dict[int, str] = {
    onnx.TensorProto.FLOAT16: "fp16",
    onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.FLOAT: "fp32",
    onnx.TensorProto.DOUBLE: "fp64",
}


@kernel("Cast", "CastLike")
def _cast(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    if c.node.op_type == "CastLike":
        like = np.asarray(ins[1])
        to = onnx.helper.np_dtype_to_tensor_dtype(like.dtype) if not is_float(like) else 1
    else:
        to = int(c.attr("to"))
    if to in _ONNX_FLOAT:  # an explicit cast rounds once to its type, then lives on chip
        return [c.out(rnd(f64(x), _ONNX_FLOAT[to]))]
    target = onnx.helper.tensor_dtype_to_np_dtype(to)
    src = f64(x) if is_float(x) else x
    return [np.asarray(src).astype(target)]


@kernel("Identity", "Dropout")
def _identity(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    return [x, np.ones(x.shape, dtype=bool)][: len(c.node.output)]


# -- layout (exact data movement) -------------------------------------------------------------
@kernel("Transpose")
def _transpose(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    perm = c.attr("perm") or list(range(x.ndim))[::-1]
    return [np.transpose(x, perm)]


@kernel("Reshape")
def _reshape(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    shape = _ints(ins[1])
    if not c.attr("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


@kernel("Flatten")
def _flatten(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    axis = int(c.attr("axis", 1))
    axis += x.ndim if axis < 0 else 0  # axis == rank is legal: every dim leads, [N, 1]
    return [x.reshape(int(np.prod(x.shape[:axis])), -1)]


def axes_of(c: OpCall, ins: list[Any]) -> list[int] | None:
    given = input_at(ins, 1)
    if given is not None:
        return _ints(given)
    axes = c.attr("axes")
    return None if axes is None else [int(a) for a in axes]


@kernel("Squeeze")
def _squeeze(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    axes = axes_of(c, ins)
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


@kernel("Unsqueeze")
def _unsqueeze(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    axes = axes_of(c, ins) or []
    rank = x.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        x = np.expand_dims(x, a)
    return [x]


@kernel("Expand")
def _expand(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    shape = np.broadcast_shapes(x.shape, tuple(_ints(ins[1])))
    return [np.broadcast_to(x, shape).copy()]


@kernel("Slice")
def _slice(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    if len(ins) > 1:
        starts, ends = _ints(ins[1]), _ints(ins[2])
        axes = _ints(ins[3]) if input_at(ins, 3) is not None else list(range(len(starts)))
        steps = _ints(ins[4]) if input_at(ins, 4) is not None else [1] * len(starts)
    else:  # opset < 10: attributes
        starts, ends = list(c.attr("starts")), list(c.attr("ends"))
        axes = list(c.attr("axes") or range(len(starts)))
        steps = [1] * len(starts)
    index: list[slice] = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        index[a % x.ndim] = slice(*slice(s, e, st).indices(x.shape[a % x.ndim]))
    return [x[tuple(index)]]


@kernel("Concat")
def _concat(c: OpCall, ins: list[Any]) -> list[Arr]:
    arrays = [np.asarray(x) for x in ins if x is not None]
    kinds = {a.dtype for a in arrays}
    if len(kinds) > 1:  # on chip: one format for the whole tile
        arrays = [c.out(c.f(a)) for a in arrays]
    return [np.concatenate(arrays, axis=c.attr("axis", 0))]


@kernel("Split")
def _split(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = np.asarray(ins[0])
    axis = c.attr("axis", 0) % x.ndim
    sizes = input_at(ins, 1)
    sizes_l = _ints(sizes) if sizes is not None else list(c.attr("split") or [])
    if not sizes_l:
        n = len(c.node.output)
        sizes_l = [-(-x.shape[axis] // n)] * n
        sizes_l[-1] = x.shape[axis] - sum(sizes_l[:-1])
    cuts = np.cumsum(sizes_l)[:-1]
    return list(np.split(x, cuts, axis=axis))


@kernel("Gather")
def _gather(c: OpCall, ins: list[Any]) -> list[Arr]:
    data, idx = np.asarray(ins[0]), np.asarray(ins[1]).astype(np.int64)
    axis = c.attr("axis", 0) % data.ndim
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take(data, idx, axis=axis)]
