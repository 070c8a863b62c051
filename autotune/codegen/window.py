"""Pooling windows read as part of any kernel: MaxPool and AveragePool (any rank, strides,
dilations, explicit or automatic padding, ceil mode). The window is unrolled: every output
element reads its kernel_shape inputs, each masked where it falls in the padding."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, add, mul
from autotune.codegen.kernel_io import Reader
from autotune.codegen.source import paren
from search_space.ir import Op

__all__ = ["WINDOW_HANDLERS", "is_depthwise", "window_pads"]

MAX_WINDOW = 64  # elements unrolled per output; a larger window is a reduction's job


def window_pads(
    op: Op, in_dims: Sequence[int], out_dims: Sequence[int], kernel: Sequence[int] | None = None
) -> tuple[list[int], list[int]]:
    """Padding before and after each spatial dim (ONNX: explicit pads, SAME_UPPER/LOWER or
    VALID)."""
    k = list(kernel if kernel is not None else op.attr("kernel_shape"))
    nd = len(k)
    strides = list(op.attr("strides") or [1] * nd)
    dil = list(op.attr("dilations") or [1] * nd)
    mode = op.attr("auto_pad", "NOTSET") or "NOTSET"
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        total = [
            max(0, (out_dims[i] - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - in_dims[i])
            for i in range(nd)
        ]
        small = [t // 2 for t in total]
        large = [t - t // 2 for t in total]
        return (small, large) if mode == "SAME_UPPER" else (large, small)
    if mode == "VALID":
        return [0] * nd, [0] * nd
    pads = list(op.attr("pads") or [0] * (2 * nd))
    return pads[:nd], pads[nd:]


@dataclass(frozen=True)
class _Tap:
    """One position of a window for the output element being read: the input's spatial
    index there, the condition that it lies inside the input ('' where every output's tap
    does), and its offsets in the window."""

    offsets: tuple[int, ...]
    position: tuple[str, ...]
    inside: str


def _taps(
    p: Reader,
    op: Op,
    idx: Index,
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    kernel: Sequence[int],
) -> Iterator[_Tap]:
    """Every position of the window of output element ``idx`` (unrolled). Each output
    coordinate, tap coordinate and bound is computed once; a bound no output's tap can
    pass (known from the output's extent) is not tested."""
    if math.prod(kernel) > MAX_WINDOW:
        raise Unsupported(f"a {list(kernel)} window")
    nd = len(kernel)
    strides = list(op.attr("strides") or [1] * nd)
    dil = list(op.attr("dilations") or [1] * nd)
    begin, _ = window_pads(op, in_shape[2:], out_shape[2:], kernel)
    coords = [p.bind(idx[2 + a], "o") for a in range(nd)]
    for offs in itertools.product(*(range(k) for k in kernel)):
        pos, conds = [], []
        for a in range(nd):
            shift, size = offs[a] * dil[a] - begin[a], in_shape[2 + a]
            q = p.bind(add(mul(coords[a], strides[a]), str(shift)), "h")
            pos.append(q)
            if shift < 0:
                conds.append(p.bind(f"{q} >= 0", "lo"))
            if (out_shape[2 + a] - 1) * strides[a] + shift >= size:
                conds.append(p.bind(f"{q} < {size}", "hi"))
        inside = p.bind(" & ".join(conds), "inside") if conds else ""
        yield _Tap(offs, tuple(pos), inside)


def _pool(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    if len([o for o in op.outputs if o]) > 1:
        raise Unsupported("MaxPool's indices output")
    x = op.inputs[0]
    in_shape, out_shape = p.io.shape(x), p.io.shape(t)
    kernel = list(op.attr("kernel_shape"))
    begin, end = window_pads(op, in_shape[2:], out_shape[2:], kernel)
    is_max = op.op_type == "MaxPool"
    lead = [p.bind(i, "o") for i in idx[:2]]  # the image and the channel, computed once
    acc, counts, always = "", [], 0
    for tap in _taps(p, op, idx, in_shape, out_shape, kernel):
        read = p.bind(f"{mask} & {tap.inside}", "mask") if tap.inside else mask
        v = p.value(x, (lead[0], lead[1], *tap.position), read)
        fill = "float('-inf')" if is_max else "0.0"
        term = f"tl.where({tap.inside}, {v}, {fill})" if tap.inside else v
        if is_max:
            acc = p.bind(f"tl.maximum({acc}, {term})" if acc else term, "pool")
            continue
        acc = p.bind(f"{acc} + {term}" if acc else term, "pool")
        counted = tap.inside
        if op.attr("count_include_pad", 0):  # the padding counts, a ceil-mode overhang not
            counted = " & ".join(
                f"({q} >= {-begin[a]}) & ({q} < {in_shape[2 + a] + end[a]})"
                for a, q in enumerate(tap.position)
            )
        if counted:
            counts.append(f"tl.where({counted}, 1.0, 0.0)")
        else:
            always += 1
    if is_max:
        return acc
    if not counts:  # every tap of every output inside: a constant divisor
        return f"{acc} / {float(always)}"
    count = p.bind(" + ".join([*counts, *([f"{float(always)}"] if always else [])]), "n")
    return f"{acc} / tl.maximum({count}, 1.0)"


def is_depthwise(op: Op, weight_shape: Sequence[int]) -> bool:
    """A convolution of one input channel per group: vector work, read as a window."""
    return op.op_type == "Conv" and len(weight_shape) > 2 and weight_shape[1] == 1


def _depthwise(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    x, w = op.inputs[0], op.inputs[1]
    in_shape, out_shape, w_shape = p.io.shape(x), p.io.shape(t), p.io.shape(w)
    if not is_depthwise(op, w_shape):
        raise Unsupported("a Conv is read off its tile")
    per_group = out_shape[1] // int(op.attr("group", 1))
    channel = p.bind(idx[1] if per_group == 1 else f"{paren(idx[1])} // {per_group}", "o")
    image = p.bind(idx[0], "o")
    acc = ""
    for tap in _taps(p, op, idx, in_shape, out_shape, w_shape[2:]):
        read = p.bind(f"{mask} & {tap.inside}", "mask") if tap.inside else mask
        v = p.value(x, (image, channel, *tap.position), read)
        wv = p.value(w, (idx[1], "0", *(str(o) for o in tap.offsets)), mask)
        term = f"tl.where({tap.inside}, {v} * {wv}, 0.0)" if tap.inside else f"{v} * {wv}"
        acc = p.bind(f"{acc} + {term}" if acc else term, "conv")
    if len(op.inputs) > 2 and op.inputs[2]:
        return f"{acc} + {p.value(op.inputs[2], (idx[1],), mask)}"
    return acc


WINDOW_HANDLERS: dict[str, Callable[[Reader, Op, str, Index, str], str]] = {
    "MaxPool": _pool,
    "AveragePool": _pool,
    "Conv": _depthwise,
}
