"""The less common ops the tool classifies, as families of the fuzzing strategy: activations,
reductions and norms past the usual ones, variadic ops, ConvTranspose, pools, CumSum, Trilu,
DepthToSpace. Most have no numpy kernel in the emulation and run in onnx's reference evaluator
there. The contract of a family is in :mod:`fuzz_ops`.
"""

from __future__ import annotations

import math

from fuzz_builder import MAX_NUMEL, Builder, Draw, Value, broadcast
from fuzz_ops import Interval, window
from hypothesis import strategies as st
from onnx import TensorProto as T


def _elu(x: float, alpha: float = 1.0) -> float:
    return x if x >= 0 else alpha * math.expm1(x)


_ACTIVATIONS: dict[str, tuple[Interval, int]] = {  # op -> (interval, lowest opset)
    "Elu": (lambda lo, hi: (_elu(lo), _elu(hi)), 6),
    "Selu": (lambda lo, hi: (1.0507 * _elu(lo, 1.6733), 1.0507 * _elu(hi, 1.6733)), 6),
    "Celu": (lambda lo, hi: (_elu(lo), _elu(hi)), 12),
    "Softsign": (lambda lo, hi: (lo / (1 + abs(lo)), hi / (1 + abs(hi))), 1),
    "Mish": (lambda lo, hi: (-0.31, max(hi, 0.0)), 18),
}


def activation(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Elu, Selu, Celu, Softsign, Mish, or PRelu with a slope per last axis."""
    ops = [
        k for k, (_, low) in _ACTIVATIONS.items()
        if b.opset >= low and (k != "Celu" or v.elem == T.FLOAT)  # Celu: float32 alone
    ]  # fmt: skip
    op = draw(st.sampled_from([*ops, "PRelu"]))
    if op == "PRelu":
        slope = b.uniform(v.shape[-1:], 0.0, 0.5, v.elem)
        return b.one("PRelu", [v.name, slope], v.shape, v.elem, min(v.lo, 0.5 * v.lo), v.hi)
    lo, hi = _ACTIVATIONS[op][0](v.lo, v.hi)
    return b.one(op, [v.name], v.shape, v.elem, lo, hi)


def reduce_more(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """ReduceL1, ReduceL2, ReduceLogSumExp or ReduceLogSum (of a value >= 0.5)."""
    if v.rank == 0:
        return None
    op = draw(st.sampled_from(["ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceLogSum"]))
    axes = sorted(
        {a % v.rank for a in draw(st.sets(st.integers(-v.rank, v.rank - 1), min_size=1))}
    )
    n = math.prod(v.shape[a] for a in axes)
    need = op == "ReduceLogSum" and v.lo < 0.5
    top = v.hi - v.lo + 0.5 if need else v.hi
    lo, hi = {
        "ReduceL1": (0.0, n * v.span),
        "ReduceL2": (0.0, math.sqrt(n) * v.span),
        "ReduceLogSumExp": (v.lo, v.hi + math.log(n)),
        "ReduceLogSum": (math.log(0.5 * n), math.log(n * max(top, 0.5))),
    }[op]
    if room < 1 + need or not b.fits(v.elem, lo, hi):
        return None
    src = b.positive(v) if op == "ReduceLogSum" else v
    keep = draw(st.integers(0, 1))
    shape = tuple(1 if i in axes else d for i, d in enumerate(v.shape) if keep or i not in axes)
    ins, attrs = b.listed("axes", axes, since=18)
    return b.one(op, [src.name, *ins], shape, v.elem, lo, hi, keepdims=keep, **attrs)


def norm(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """InstanceNormalization, GroupNormalization (opset 21), LpNormalization, or
    RMSNormalization (opset 23) over the channels or the last axes."""
    if v.rank == 0:
        return None
    kinds = ["lp"] + (["instance"] if v.rank >= 3 else []) + (["rms"] if b.opset >= 23 else [])
    kinds += ["group"] if v.rank >= 3 and b.opset >= 21 else []
    kind = draw(st.sampled_from(kinds))
    axis = draw(st.integers(-v.rank, v.rank - 1))
    if kind == "lp":  # of a value >= 0.5: a row of zeros would divide 0 by 0
        if room < 1 + (v.lo < 0.5):
            return None
        src, p = b.positive(v), draw(st.integers(1, 2))
        return b.one("LpNormalization", [src.name], v.shape, v.elem, 0.0, 1.0, axis=axis, p=p)
    if kind == "rms":
        tail = v.shape[axis:]
        span = 1.5 * math.sqrt(math.prod(tail))
        scale = b.uniform(tail, 0.5, 1.5, v.elem)
        return b.one("RMSNormalization", [v.name, scale], v.shape, v.elem, -span, span, axis=axis)
    c = v.shape[1]
    g = draw(st.sampled_from([g for g in (1, 2, c) if c % g == 0])) if kind == "group" else c
    span = 1.5 * math.sqrt(math.prod(v.shape[2:]) * c // g) + 0.5
    ins = [v.name, b.uniform((c,), 0.5, 1.5, v.elem), b.uniform((c,), -0.5, 0.5, v.elem)]
    if kind == "group":
        return b.one("GroupNormalization", ins, v.shape, v.elem, -span, span, num_groups=g)
    return b.one("InstanceNormalization", ins, v.shape, v.elem, -span, span)


def variadic(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Sum, Mean, Max or Min of three values that broadcast together."""
    op = draw(st.sampled_from(["Sum", "Mean", "Max", "Min"]))
    mates = [u for u in b.pool if u.elem == v.elem and broadcast(u.shape, v.shape) is not None]
    us = [v, draw(st.sampled_from(mates)), draw(st.sampled_from(mates))]
    shape = broadcast(broadcast(us[0].shape, us[1].shape) or (), us[2].shape)
    lo, hi = min(u.lo for u in us), max(u.hi for u in us)
    if op == "Sum":
        lo, hi = sum(u.lo for u in us), sum(u.hi for u in us)
    if shape is None or not b.fits(v.elem, lo, hi):
        return None
    return b.one(op, [u.name for u in us], shape, v.elem, lo, hi)


def conv_transpose(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """A 1-D or 2-D ConvTranspose (stride 1 or 2, grouped sometimes), with a bias sometimes."""
    if v.rank not in (3, 4):
        return None
    c = v.shape[1]
    # grouped only as depthwise with one output channel each: onnx's reference evaluator
    # (safe mode's float64 oracle) fails on other grouped ConvTransposes (onnx 1.23), and the
    # kernel is left unverified
    group = draw(st.sampled_from([1, c]))
    cout = c if group > 1 else draw(st.sampled_from([1, 2, 4]))
    ks = [draw(st.integers(1, 3)) for _ in v.shape[2:]]
    strides = [draw(st.integers(1, 2)) for _ in ks]
    pads = [draw(st.integers(0, k - 1)) for k in ks]
    spatial = tuple(
        (d - 1) * s + k - 2 * p for d, k, s, p in zip(v.shape[2:], ks, strides, pads, strict=True)
    )
    fan_in = c // group * math.prod(ks)
    w = 1 / math.sqrt(fan_in)
    span = fan_in * v.span * w + 0.5
    shape = (v.shape[0], cout, *spatial)
    if min(spatial) < 1 or math.prod(shape) > MAX_NUMEL or not b.fits(v.elem, -span, span):
        return None
    ins = [v.name, b.uniform((c, cout // group, *ks), -w, w, v.elem)]
    if draw(st.booleans()):
        ins.append(b.uniform((cout,), -0.5, 0.5, v.elem))
    return b.one("ConvTranspose", ins, shape, v.elem, -span, span,
                 kernel_shape=ks, strides=strides, pads=pads * 2, group=group)  # fmt: skip


def pool_more(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """AveragePool (2-D, padding counted or not) or GlobalMaxPool."""
    if v.rank not in (3, 4):
        return None
    if draw(st.booleans()):
        shape = (*v.shape[:2], *(1 for _ in v.shape[2:]))
        return b.one("GlobalMaxPool", [v.name], shape, v.elem, v.lo, v.hi)
    wins = [window(draw, d, 3) for d in v.shape[2:]]
    if v.rank != 4 or any(w is None for w in wins):
        return None
    ks, strides = [w[0] for w in wins if w], [w[1] for w in wins if w]
    pads = [w[2] for w in wins if w]
    spatial = [
        (d + 2 * p - k) // s + 1 for d, k, s, p in zip(v.shape[2:], ks, strides, pads, strict=True)
    ]
    counted = draw(st.integers(0, 1))
    lo, hi = (min(v.lo, 0.0), max(v.hi, 0.0)) if counted else (v.lo, v.hi)
    return b.one("AveragePool", [v.name], (*v.shape[:2], *spatial), v.elem, lo, hi,
                 kernel_shape=ks, strides=strides, pads=pads * 2,
                 count_include_pad=counted)  # fmt: skip


def scan(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """CumSum along an axis (exclusive or reversed sometimes), Trilu (opset 14), or
    DepthToSpace / SpaceToDepth by 2."""
    if v.rank == 0:
        return None
    kind = draw(st.sampled_from(["cumsum", "trilu", "space"]))
    if kind == "cumsum" and (v.elem == T.FLOAT or b.opset >= 14):  # float16 from opset 14
        axis = draw(st.integers(-v.rank, v.rank - 1))
        n = v.shape[axis]
        lo, hi = min(n * v.lo, v.lo, 0.0), max(n * v.hi, v.hi, 0.0)
        if not b.fits(v.elem, lo, hi):
            return None
        flags = {"exclusive": draw(st.integers(0, 1)), "reverse": draw(st.integers(0, 1))}
        return b.one("CumSum", [v.name, b.scalar_int(axis)], v.shape, v.elem, lo, hi, **flags)
    if kind == "trilu" and v.rank >= 2 and b.opset >= 14:
        k = draw(st.integers(-2, 2))
        lo, hi = min(v.lo, 0.0), max(v.hi, 0.0)
        return b.one("Trilu", [v.name, b.scalar_int(k)], v.shape, v.elem, lo, hi,
                     upper=draw(st.integers(0, 1)))  # fmt: skip
    if kind != "space" or v.rank != 4:
        return None
    n, c, h, w = v.shape
    if draw(st.booleans()) and c % 4 == 0:
        mode = draw(st.sampled_from(["DCR", "CRD"]))
        shape = (n, c // 4, 2 * h, 2 * w)
        return b.one("DepthToSpace", [v.name], shape, v.elem, v.lo, v.hi, blocksize=2, mode=mode)
    if h % 2 or w % 2:
        return None
    shape = (n, 4 * c, h // 2, w // 2)
    return b.one("SpaceToDepth", [v.name], shape, v.elem, v.lo, v.hi, blocksize=2)
