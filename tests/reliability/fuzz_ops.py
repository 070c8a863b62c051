"""Op families of the fuzzing strategy (:mod:`fuzz_graphs`): each draws one op on a value.

A family takes ``(draw, builder, value, room)`` and adds at most ``room`` nodes reading
``value``, returning the new value, or ``None`` (adding nothing) when it does not apply: the
wrong rank, too few nodes left, or a result too large for its type. Intervals follow each op
(monotone ops map the ends; MatMul, Conv and the norms bound by magnitude).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from fuzz_builder import Builder, Draw, Value, broadcast, corners
from hypothesis import strategies as st
from onnx import TensorProto as T
from scipy import special

Family = Callable[[Draw, Builder, Value, int], Value | None]
Interval = Callable[[float, float], tuple[float, float]]


def _mono(fn: Callable[[float], float]) -> Interval:
    return lambda lo, hi: (fn(lo), fn(hi))


def _hard_swish(x: float) -> float:
    return x * min(max(x / 6 + 0.5, 0.0), 1.0)


def _exp(x: float) -> float:
    return math.exp(x) if x < 700 else math.inf


_UNARY: dict[str, tuple[Interval, int]] = {  # op -> (interval, lowest opset)
    "Relu": (lambda lo, hi: (max(lo, 0.0), max(hi, 0.0)), 1),
    "Sigmoid": (_mono(lambda x: float(special.expit(x))), 1),
    "Tanh": (_mono(math.tanh), 1),
    "Erf": (_mono(math.erf), 1),
    "Abs": (lambda lo, hi: (max(lo, -hi, 0.0), max(-lo, hi)), 1),
    "Neg": (lambda lo, hi: (-hi, -lo), 1),
    "Sin": (lambda lo, hi: (-1.0, 1.0), 1),
    "Cos": (lambda lo, hi: (-1.0, 1.0), 1),
    "Exp": (_mono(_exp), 1),
    "Softplus": (_mono(lambda x: float(np.logaddexp(0.0, x))), 1),
    "HardSigmoid": (_mono(lambda x: min(max(0.2 * x + 0.5, 0.0), 1.0)), 1),
    "HardSwish": (lambda lo, hi: (-0.375, max(_hard_swish(lo), _hard_swish(hi), 0.0)), 14),
    "LeakyRelu": (lambda lo, hi: (min(lo, 0.1 * lo), max(hi, 0.1 * hi)), 1),
    "Gelu": (lambda lo, hi: (-0.2, max(hi, 0.0)), 20),
    "Clip": (lambda lo, hi: (min(max(lo, -1.0), 1.0), max(min(hi, 1.0), -1.0)), 11),
    "Sqrt": (_mono(math.sqrt), 1),  # these three read a value >= 0.5 (Builder.positive)
    "Log": (_mono(math.log), 1),
    "Reciprocal": (lambda lo, hi: (1 / hi, 1 / lo), 1),
}
_POSITIVE = frozenset({"Sqrt", "Log", "Reciprocal"})


def unary(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """An activation or other one-input elementwise op."""
    op = draw(st.sampled_from([k for k, (_, low) in _UNARY.items() if b.opset >= low]))
    need = op in _POSITIVE and v.lo < 0.5
    x = (0.5, v.hi - v.lo + 0.5) if need else (v.lo, v.hi)
    lo, hi = _UNARY[op][0](*x)
    if room < 1 + need or not b.fits(v.elem, lo, hi):
        return None
    src = b.positive(v) if op in _POSITIVE else v
    ins, attrs = [src.name], dict[str, Any]()
    if op == "Clip":  # bounds as inputs (opset 11 on), the lower one sometimes left out
        ins += ["" if draw(st.booleans()) else b.const(np.float32(-1.0), v.elem)]
        ins += [b.const(np.float32(1.0), v.elem)]
        lo = min(v.lo, 1.0) if ins[1] == "" else lo
    if op == "LeakyRelu":
        attrs["alpha"] = 0.1
    if op == "Gelu" and draw(st.booleans()):
        attrs["approximate"] = "tanh"
    return b.one(op, ins, v.shape, v.elem, lo, hi, **attrs)


_BINARY: dict[str, Callable[[float, float], float]] = {
    "Add": lambda x, y: x + y,
    "Sub": lambda x, y: x - y,
    "Mul": lambda x, y: x * y,
    "Div": lambda x, y: x / y,  # divisors are >= 0.5
    "Max": max,
    "Min": min,
}


def binary(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Add, Sub, Mul, Div, Max or Min with another value (broadcast) or a constant."""
    op = draw(st.sampled_from(sorted(_BINARY)))
    partners = [
        u for u in b.pool
        if u.elem == v.elem and broadcast(v.shape, u.shape) is not None
        and (op != "Div" or u.lo >= 0.5)
    ]  # fmt: skip
    u = draw(st.sampled_from(partners)) if partners and draw(st.booleans()) else None
    if u is not None:
        shape, ends = u.shape, (u.lo, u.hi)
    else:
        shape = draw(st.sampled_from([(), v.shape[-1:], v.shape, (1, *v.shape[1:])]))
        ends = (0.5, 1.5) if op == "Div" else (-1.0, 1.0)
    first = op == "Div" or draw(st.booleans())  # the other operand goes second or first
    lo, hi = corners(_BINARY[op], *(((v.lo, v.hi), ends) if first else (ends, (v.lo, v.hi))))
    out = broadcast(v.shape, shape)
    if out is None or not b.fits(v.elem, lo, hi):
        return None
    other = u.name if u is not None else b.uniform(shape, *ends, v.elem)
    return b.one(op, [v.name, other] if first else [other, v.name], out, v.elem, lo, hi)


def power(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Pow by a constant exponent (0.5 reads a value >= 0.5)."""
    p = draw(st.sampled_from([2.0, 3.0, 0.5]))
    need = p == 0.5 and v.lo < 0.5
    ends = (0.5, v.hi - v.lo + 0.5) if need else (v.lo, v.hi)
    lo, hi = corners(lambda x, y: x**y, ends, (p, p))
    if p == 2.0 and ends[0] < 0 < ends[1]:
        lo = 0.0
    if room < 1 + need or not b.fits(v.elem, lo, hi):
        return None
    src = b.positive(v) if p == 0.5 else v
    return b.one("Pow", [src.name, b.const(np.float32(p), v.elem)], v.shape, v.elem, lo, hi)


def cast(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Cast to the other float type (a rounding), or to its own (a no-op view)."""
    to = draw(st.sampled_from([T.FLOAT, T.FLOAT16]))
    if not b.fits(to, v.lo, v.hi):
        return None
    return b.one("Cast", [v.name], v.shape, to, v.lo, v.hi, to=to)


def softmax(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Softmax or LogSoftmax from an axis (over it alone from opset 13, over every axis from
    it on before)."""
    if v.rank == 0:
        return None
    axis = draw(st.integers(-v.rank, v.rank - 1))
    if draw(st.booleans()):
        return b.one("Softmax", [v.name], v.shape, v.elem, 0.0, 1.0, axis=axis)
    lo = v.lo - v.hi - math.log(math.prod(v.shape[axis:]))
    return b.one("LogSoftmax", [v.name], v.shape, v.elem, lo, 0.0, axis=axis)


def layer_norm(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """LayerNormalization from an axis on, with a scale and sometimes a bias."""
    if v.rank == 0:
        return None
    axis = draw(st.integers(-v.rank, v.rank - 1))
    tail = v.shape[axis:]
    ins = [v.name, b.uniform(tail, 0.5, 1.5, v.elem)]
    if draw(st.booleans()):
        ins.append(b.uniform(tail, -0.5, 0.5, v.elem))
    span = 1.5 * math.sqrt(math.prod(tail)) + 0.5
    return b.one("LayerNormalization", ins, v.shape, v.elem, -span, span, axis=axis)


_REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare")


def reduce(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """A Reduce* over some axes, keeping them or not."""
    if v.rank == 0:
        return None
    op = draw(st.sampled_from(_REDUCE))
    axes = sorted(draw(st.sets(st.integers(0, v.rank - 1), min_size=1)))
    keep = draw(st.integers(0, 1))
    n = math.prod(v.shape[a] for a in axes)
    lo, hi = {
        "ReduceSum": (n * v.lo, n * v.hi),
        "ReduceSumSquare": (0.0, n * v.span**2),
    }.get(op, (v.lo, v.hi))
    if not b.fits(v.elem, lo, hi):
        return None
    shape = tuple(1 if i in axes else d for i, d in enumerate(v.shape) if keep or i not in axes)
    ins, attrs = b.listed("axes", axes, since=13 if op == "ReduceSum" else 18)
    return b.one(op, [v.name, *ins], shape, v.elem, lo, hi, keepdims=keep, **attrs)


def matmul(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """MatMul by a weight, or by another value whose shape lines up (batch dims broadcast)."""
    if v.rank < 2:
        return None
    k = v.shape[-1]
    partners = [
        u for u in b.pool
        if u.elem == v.elem and u.rank >= 2 and u.shape[-2] == k
        and broadcast(v.shape[:-2], u.shape[:-2]) is not None
    ]  # fmt: skip
    u = draw(st.sampled_from(partners)) if partners and draw(st.booleans()) else None
    if u is not None:
        wspan, n, batch = u.span, u.shape[-1], broadcast(v.shape[:-2], u.shape[:-2]) or ()
    else:
        wspan, n, batch = 1 / math.sqrt(k), draw(st.sampled_from([1, 2, 4, 8, 16])), v.shape[:-2]
    span = k * v.span * wspan
    if not b.fits(v.elem, -span, span):
        return None
    other = u.name if u is not None else b.uniform((k, n), -wspan, wspan, v.elem)
    return b.one("MatMul", [v.name, other], (*batch, v.shape[-2], n), v.elem, -span, span)


def gemm(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Gemm of a 2-D value by a weight (either transposed), with a bias of some shape."""
    if v.rank != 2:
        return None
    trans_a, trans_b = draw(st.integers(0, 1)), draw(st.integers(0, 1))
    m, k = v.shape[::-1] if trans_a else v.shape
    n = draw(st.sampled_from([1, 3, 8, 16]))
    bias = draw(st.sampled_from([None, (n,), (1, n), (m, n), ()]))
    alpha = draw(st.sampled_from([1.0, 0.5]))
    w = 1 / math.sqrt(k)
    span = k * v.span * w + 0.5
    if not b.fits(v.elem, -span, span):
        return None
    ins = [v.name, b.uniform((n, k) if trans_b else (k, n), -w, w, v.elem)]
    if bias is not None:
        ins.append(b.uniform(bias, -0.5, 0.5, v.elem))
    return b.one("Gemm", ins, (m, n), v.elem, -span, span, transA=trans_a, transB=trans_b,
                 alpha=alpha)  # fmt: skip


def window(draw: Draw, size: int, k_max: int) -> tuple[int, int, int, int] | None:
    """(kernel, stride, pad begin, pad end) for an axis of ``size``, or None."""
    k = draw(st.integers(1, min(k_max, size + 1)))
    s, p = draw(st.integers(1, 2)), draw(st.integers(0, min(1, k - 1)))
    return (k, s, p, p) if size + 2 * p >= k else None


def conv(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """A 1-D or 2-D Conv (dense, grouped or depthwise), with a bias sometimes."""
    if v.rank not in (3, 4):
        return None
    c = v.shape[1]
    group = draw(st.sampled_from([g for g in (1, 2, c) if c % g == 0]))
    cout = group * draw(st.sampled_from([1, 2, 4, 8]))
    wins = [window(draw, d, 3) for d in v.shape[2:]]
    if any(w is None for w in wins):
        return None
    ks = [w[0] for w in wins if w is not None]
    strides = [w[1] for w in wins if w is not None]
    pads = [w[2] for w in wins if w is not None] * 2
    spatial = tuple(
        (d + 2 * p - k) // s + 1
        for d, k, s, p in zip(v.shape[2:], ks, strides, pads, strict=False)
    )
    fan_in = c // group * math.prod(ks)
    w = 1 / math.sqrt(fan_in)
    span = fan_in * v.span * w + 0.5
    if not b.fits(v.elem, -span, span):
        return None
    ins = [v.name, b.uniform((cout, c // group, *ks), -w, w, v.elem)]
    if draw(st.booleans()):
        ins.append(b.uniform((cout,), -0.5, 0.5, v.elem))
    return b.one("Conv", ins, (v.shape[0], cout, *spatial), v.elem, -span, span,
                 kernel_shape=ks, strides=strides, pads=pads, group=group)  # fmt: skip


def pool(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """MaxPool (2-D, ceil mode sometimes) or GlobalAveragePool."""
    if v.rank not in (3, 4):
        return None
    if draw(st.booleans()):
        shape = (*v.shape[:2], *(1 for _ in v.shape[2:]))
        return b.one("GlobalAveragePool", [v.name], shape, v.elem, v.lo, v.hi)
    wins = [window(draw, d, 3) for d in v.shape[2:]]
    if v.rank != 4 or any(w is None for w in wins) or all(w and w[0] == 1 for w in wins):
        return None
    ks, strides = [w[0] for w in wins if w], [w[1] for w in wins if w]
    pads = [w[2] for w in wins if w] * 2
    ceil = draw(st.integers(0, 1))
    spatial = []
    for d, k, s, p in zip(v.shape[2:], ks, strides, pads, strict=False):
        n = (math.ceil if ceil else math.floor)((d + 2 * p - k) / s) + 1
        if ceil and (n - 1) * s >= d + p:
            # a last window starting in the end padding: onnx's shape inference counts it,
            # onnxruntime and onnx's reference evaluator do not (onnx 1.23), so such a model
            # has no valid static output shape
            return None
        spatial.append(n)
    return b.one("MaxPool", [v.name], (*v.shape[:2], *spatial), v.elem, v.lo, v.hi,
                 kernel_shape=ks, strides=strides, pads=pads, ceil_mode=ceil)  # fmt: skip


def batch_norm(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """BatchNormalization (inference) over axis 1."""
    if v.rank < 2:
        return None
    c = (v.shape[1],)
    ranges = ((0.5, 1.5), (-0.5, 0.5), (-0.5, 0.5), (0.5, 1.5))  # scale, bias, mean, var
    ins = [v.name, *(b.uniform(c, lo, hi, v.elem) for lo, hi in ranges)]
    span = (v.span + 0.5) * 1.5 / math.sqrt(0.5) + 0.5
    return b.one("BatchNormalization", ins, v.shape, v.elem, -span, span)


def where(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Where(v > 0, v, other): a mask from a comparison, as exporters write ReLU-like guards."""
    if room < 2:
        return None
    zero = b.const(np.float32(0.0), v.elem)
    cond = b.one("Greater", [v.name, zero], v.shape, T.BOOL, 0, 1, hidden=True)
    other = b.uniform(draw(st.sampled_from([(), v.shape])), -1.0, 1.0, v.elem)
    lo, hi = min(v.lo, -1.0), max(v.hi, 1.0)
    return b.one("Where", [cond.name, v.name, other], v.shape, v.elem, lo, hi)


def fallback(b: Builder, v: Value) -> Value:
    """Relu: applies to every value."""
    return b.one("Relu", [v.name], v.shape, v.elem, max(v.lo, 0.0), max(v.hi, 0.0))
