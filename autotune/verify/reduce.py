"""Reductions and normalisations: sums add pairwise in the statistics format.

Statistics (means, variances, softmax sums) are formed in ``num.stat`` (fp32 under ``auto``,
fp16 under the ``stats_fp16`` knob) while normalising and scaling run in the vector format.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.verify.numerics import f64, rnd, tree_sum
from autotune.verify.ops import Arr, OpCall, axes_of, input_at, kernel

__all__: list[str] = []


# -- reductions and normalisations ------------------------------------------------------------
def _reduce_axes(c: OpCall, ins: list[Any], rank: int) -> tuple[int, ...]:
    axes = axes_of(c, ins)
    if not axes:
        return () if c.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted(a % rank for a in axes))


@kernel("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare")
def _reduce(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = c.f(ins[0])
    axes = _reduce_axes(c, ins, x.ndim)
    keep = bool(c.attr("keepdims", 1))
    if not axes:
        return [c.out(x)]
    op = c.node.op_type
    if op in ("ReduceMax", "ReduceMin"):
        fn = np.max if op == "ReduceMax" else np.min
        return [c.out(fn(x, axis=axes, keepdims=keep))]
    if op == "ReduceSumSquare":
        x = f64(c.out(x * x))
    total = f64(tree_sum(x, axes, c.fmt, keepdims=keep))
    if op == "ReduceMean":
        total = total / int(np.prod([x.shape[a] for a in axes]))
    return [c.out(total)]


@kernel("GlobalAveragePool")
def _global_avg(c: OpCall, ins: list[Any]) -> list[Arr]:
    x = c.f(ins[0])
    axes = tuple(range(2, x.ndim))
    total = f64(tree_sum(x, axes, c.fmt))
    return [c.out(total / int(np.prod(x.shape[2:])))]


def _softmax_2d(x: Arr, axis: int, coerce: bool) -> tuple[Arr, tuple[int, ...]]:
    if not coerce:
        return np.moveaxis(x, axis, -1), x.shape
    lead = int(np.prod(x.shape[:axis]))
    return x.reshape(lead, -1), x.shape


@kernel("Softmax", "LogSoftmax")
def _softmax(c: OpCall, ins: list[Any]) -> list[Arr]:
    """Max and sum in the statistics format, exp and the division in the vector format."""
    vec, stat = c.num.vec, c.extra.get("stat", c.num.stat)
    x = c.f(ins[0], fmt=vec)
    coerce = c.opset < 13
    axis = c.attr("axis", 1 if coerce else -1) % x.ndim
    flat, shape = _softmax_2d(x, axis, coerce)
    with np.errstate(all="ignore"):
        m = np.max(flat, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        d = f64(rnd(flat - m, vec))
        e = f64(rnd(np.exp(d), vec))
        s = f64(tree_sum(e, -1, stat))
        y = np.log(e / s) if c.node.op_type == "LogSoftmax" else e / s
    y = f64(rnd(y, vec))
    y = y.reshape(shape) if coerce else np.moveaxis(y, -1, axis)
    return [rnd(y, c.fmt)]


@kernel("LayerNormalization")
def _layer_norm(c: OpCall, ins: list[Any]) -> list[Arr]:
    """Mean and variance in the statistics format; normalise and scale in the vector one."""
    vec, stat = c.num.vec, c.extra.get("stat", c.num.stat)
    x = np.asarray(ins[0])
    axis = c.attr("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    n = int(np.prod(x.shape[axis:]))
    eps = float(c.attr("epsilon", 1e-5))
    xs = c.f(x, fmt=stat)
    with np.errstate(all="ignore"):
        mean = f64(rnd(f64(tree_sum(xs, axes, stat)) / n, stat))
        d = f64(rnd(xs - mean, stat))
        var = f64(rnd(f64(tree_sum(f64(rnd(d * d, stat)), axes, stat)) / n, stat))
        rstd = f64(rnd(1.0 / np.sqrt(f64(rnd(var + eps, stat))), stat))
        xv = c.f(x, fmt=vec)
        y = f64(rnd(f64(rnd(xv - f64(rnd(mean, vec)), vec)) * f64(rnd(rstd, vec)), vec))
        y = f64(rnd(y * c.f(ins[1], 1, vec), vec))
        if input_at(ins, 2) is not None:
            y = f64(rnd(y + c.f(ins[2], 2, vec), vec))
    return [c.out(y), rnd(mean, stat), rnd(rstd, stat)][: len(c.node.output)]


@kernel("BatchNormalization")
def _batch_norm(c: OpCall, ins: list[Any]) -> list[Arr]:
    """Inference form: per-channel scale and shift prepared offline, applied in one pass."""
    x = c.f(ins[0])
    eps = float(c.attr("epsilon", 1e-5))
    scale, bias, mean, var = (f64(v) for v in ins[1:5])
    a = scale / np.sqrt(var + eps)
    b = bias - mean * a
    shape = (1, -1) + (1,) * (x.ndim - 2)
    a_r, b_r = c.f(a.reshape(shape), 1), c.f(b.reshape(shape), 1)
    return [c.out(f64(c.out(x * a_r)) + b_r)]
