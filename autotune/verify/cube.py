"""Cube work as the hardware rounds it: fp16/bf16 operands, fp32 L0C, split-K in tile order.

A matmul's K axis is cut into ``base_k`` chunks (the L1 block); each chunk's product is formed
in fp32 (float32 BLAS on operands already rounded to the cube format) and the partial sums are
added to the accumulator one after another in fp32, as the L0C accumulation does. Conv is the
same matmul over an im2col of its input (K = Cin/group x kh x kw). Depthwise convolutions run
on the vector unit: tap after tap in the vector format. Fused attention walks the keys in
``kv_tile`` blocks with a running max and sum (online softmax), rescaling the accumulator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from autotune.verify.numerics import Numerics, f64, rnd, tree_sum
from autotune.verify.ops import OpCall, kernel
from costmodel.lower.common import kv_ranges

__all__ = ["conv2d", "flash_attention", "im2col", "online_softmax", "split_k_matmul"]

Arr = np.ndarray


def _chunks(k: int, base_k: int) -> list[tuple[int, int]]:
    step = base_k if 0 < base_k < k else k
    return [(s, min(k, s + step)) for s in range(0, max(k, 1), step)]


def split_k_matmul(a: Arr, b: Arr, num: Numerics, base_k: int | None = None) -> Arr:
    """``a @ b`` with cube rounding: operands in ``num.cube``, fp32 partial sums per K chunk.

    Args:
        a, b: operands as numpy matmul takes them (batched, 1-D allowed), any float format.
        num: formats; ``num.acc`` is the accumulator format.
        base_k: the K chunk (default ``num.base_k``; 0 = one chunk).

    Returns:
        The accumulator, in ``num.acc``.
    """
    acc_t = np.float32 if num.acc == "fp32" else np.float64
    a_c = rnd(a, num.cube).astype(acc_t)
    b_c = rnd(b, num.cube).astype(acc_t)
    k = a_c.shape[-1]
    out: Arr | None = None
    for lo, hi in _chunks(k, num.base_k if base_k is None else base_k):
        pa = a_c[..., lo:hi]
        pb = b_c[lo:hi] if b_c.ndim == 1 else b_c[..., lo:hi, :]
        part = np.matmul(pa, pb).astype(acc_t)
        out = part if out is None else (out + part).astype(acc_t)
    assert out is not None
    return rnd(out, num.acc)


@kernel("MatMul")
def _matmul(c: OpCall, ins: list[Any]) -> list[Arr]:
    if c.unit != "cube":  # a matmul the classifier put on the vector unit
        return [c.out(f64(c.f(ins[0])) @ f64(c.f(ins[1], 1)))]
    return [split_k_matmul(ins[0], ins[1], c.num, c.base_k)]


@kernel("Gemm")
def _gemm(c: OpCall, ins: list[Any]) -> list[Arr]:
    """alpha * A' @ B' on the cube, then beta * C added to the fp32 accumulator (FixPipe)."""
    a, b = np.asarray(ins[0]), np.asarray(ins[1])
    a = a.T if c.attr("transA", 0) else a
    b = b.T if c.attr("transB", 0) else b
    acc = f64(split_k_matmul(a, b, c.num, c.base_k)) * float(c.attr("alpha", 1.0))
    y = f64(rnd(acc, c.num.acc))
    if len(ins) > 2 and ins[2] is not None:
        bias = f64(rnd(ins[2], c.num.acc, saturate=True)) * float(c.attr("beta", 1.0))
        y = f64(rnd(y + bias, c.num.acc))
    return [rnd(y, c.num.acc)]


# -- convolution ------------------------------------------------------------------------------
def _pads(
    c: OpCall, x: Arr, kshape: tuple[int, ...], strides: list[int], dil: list[int]
) -> list[int]:
    auto = c.attr("auto_pad", "NOTSET")
    nd = len(kshape)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kshape[i] - 1) * dil[i] + 1 - size)
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + nd] = lo, total - lo
        return pads
    if auto == "VALID":
        return [0] * (2 * nd)
    return list(c.attr("pads") or [0] * (2 * nd))


def im2col(
    x: Arr, kshape: tuple[int, int], strides: list[int], dil: list[int], pads: list[int]
) -> Arr:
    """[N, C, H, W] -> [N, OH, OW, C, kh, kw] patches (the cube's img2col view)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    kh, kw = kshape
    span = ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1)
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))
    win = win[:, :, :: strides[0], :: strides[1], :: dil[0], :: dil[1]]
    return np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5))


def conv2d(c: OpCall, x: Arr, w: Arr, bias: Arr | None, *, vector: bool) -> Arr:
    """2-D convolution as grouped im2col matmuls (cube) or tap-by-tap sums (vector)."""
    group = int(c.attr("group", 1))
    kshape = tuple(w.shape[2:])
    strides = list(c.attr("strides") or [1, 1])
    dil = list(c.attr("dilations") or [1, 1])
    pads = _pads(c, x, kshape, strides, dil)
    n, cin = x.shape[:2]
    cout = w.shape[0]
    cg, og = cin // group, cout // group
    fmt_in = c.num.vec if vector else c.num.cube
    cols = im2col(f64(rnd(x, fmt_in)), (kshape[0], kshape[1]), strides, dil, pads)
    oh, ow = cols.shape[1:3]
    outs = []
    for g in range(group):
        cg_cols = cols[:, :, :, g * cg : (g + 1) * cg].reshape(n, oh * ow, -1)
        wg = f64(rnd(w[g * og : (g + 1) * og], fmt_in, saturate=True)).reshape(og, -1).T
        if vector:
            acc = np.zeros((n, oh * ow, og))
            with np.errstate(all="ignore"):
                for k in range(wg.shape[0]):  # one multiply-add per tap, rounded each time
                    prod = f64(rnd(cg_cols[:, :, k : k + 1] * wg[k], c.num.vec))
                    acc = f64(rnd(acc + prod, c.num.vec))
            outs.append(acc)
        else:
            outs.append(f64(split_k_matmul(cg_cols, wg, c.num, c.base_k)))
    y = np.concatenate(outs, axis=-1).reshape(n, oh, ow, cout).transpose(0, 3, 1, 2)
    fmt_out = c.num.vec if vector else c.num.acc
    if bias is not None:
        y = f64(rnd(y + f64(rnd(bias, fmt_out, saturate=True)).reshape(1, -1, 1, 1), fmt_out))
    return rnd(y, fmt_out)


@kernel("Conv")
def _conv(c: OpCall, ins: list[Any]) -> list[Arr]:
    x, w = np.asarray(ins[0]), np.asarray(ins[1])
    if x.ndim != 4:
        raise NotImplementedError("only 2-D Conv is emulated")
    bias = np.asarray(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return [conv2d(c, x, w, bias, vector=c.unit != "cube")]


# -- attention --------------------------------------------------------------------------------
Guard = Callable[[Arr, int, int], Arr]


def flash_attention(
    scores: Arr, v: Arr, num: Numerics, kv_tile: int | None = None, guard: Guard | None = None
) -> Arr:
    """softmax(scores) @ v, walking the keys in ``kv_tile`` blocks with online softmax.

    The running max and sum live in ``num.stat``, the unnormalised probabilities in
    ``num.vec`` (rounded to ``num.cube`` for the PV product), the output accumulator in
    ``num.acc``; each block rescales what came before by exp(old max - new max). ``guard``
    (e.g. an IsNaN/Where after the softmax) is applied to each block's probabilities, given
    the key range ``[lo, hi)``. With ``num.kv_split`` > 1 (flash-decoding) the keys are cut
    into that many contiguous parts, each walked by its own core as above; each part's output
    (normalised, in ``num.acc``) and log-sum-exp (in ``num.stat``) go to a workspace, and a
    combining pass weighs the parts by exp(lse - max lse).

    Returns:
        The attention output in ``num.acc``.
    """
    s = f64(scores)
    t = s.shape[-1]
    tile = num.kv_tile if kv_tile is None else kv_tile
    parts = kv_ranges(t, num.kv_split, tile)
    with np.errstate(all="ignore"):
        if len(parts) == 1:
            out, _, l_sum = _flash_pass(s, v, num, tile, guard, 0, t)
            return rnd(out / l_sum, num.acc)
        outs, lses = [], []
        for lo, hi in parts:
            out, m, l_sum = _flash_pass(s, v, num, tile, guard, lo, hi)
            empty = ~(l_sum > 0)  # a part every key of which is masked adds nothing
            outs.append(f64(rnd(np.where(empty, 0.0, out / np.where(empty, 1.0, l_sum)), num.acc)))
            lse = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, l_sum)))
            lses.append(f64(rnd(lse, num.stat)))
        top = np.max(np.stack(lses), axis=0)
        top = np.where(np.isfinite(top), top, 0.0)
        weights = [f64(rnd(np.exp(lse - top), num.stat)) for lse in lses]
        total = f64(rnd(sum(weights), num.stat))
        acc = f64(rnd(sum(w * o for w, o in zip(weights, outs, strict=True)), num.acc))
        return rnd(acc / total, num.acc)


def _flash_pass(
    s: Arr, v: Arr, num: Numerics, tile: int, guard: Guard | None, start: int, stop: int
) -> tuple[Arr, Arr, Arr]:
    """Online softmax over keys ``[start, stop)`` in ``tile`` blocks: the unnormalised output,
    the running max and the running sum."""
    lead = s.shape[:-1]
    m = np.full((*lead, 1), -np.inf)
    l_sum = np.zeros((*lead, 1))
    out: Arr | None = None
    for a, b in _chunks(stop - start, tile):
        lo, hi = start + a, start + b
        blk = s[..., lo:hi]
        m_new = np.maximum(m, np.max(blk, axis=-1, keepdims=True))
        m_safe = np.where(np.isfinite(m_new), m_new, 0.0)
        p = f64(rnd(np.exp(f64(rnd(blk - m_safe, num.vec))), num.vec))
        if guard is not None:
            p = f64(guard(p, lo, hi))
        alpha = f64(rnd(np.exp(np.where(np.isfinite(m), m - m_safe, -np.inf)), num.stat))
        l_sum = f64(rnd(l_sum * alpha + f64(tree_sum(p, -1, num.stat)), num.stat))
        pv = f64(split_k_matmul(p, v[..., lo:hi, :], num, base_k=0))
        out = pv if out is None else f64(rnd(out * alpha + pv, num.acc))
        m = m_new
    assert out is not None
    return out, m, l_sum


def online_softmax(scores: Arr, num: Numerics, kv_tile: int) -> Arr:
    """The probabilities online softmax produces (a flash pass against the identity)."""
    t = scores.shape[-1]
    exact = Numerics("fp32", "fp32", num.vec, num.stat, num.mem, kv_tile=kv_tile)
    return flash_attention(scores, np.eye(t), exact, kv_tile)
