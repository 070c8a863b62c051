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
        total = [max(0, (out_dims[i] - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - in_dims[i])
                 for i in range(nd)]  # fmt: skip
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
    index there, whether it lies inside the input, and its offsets in the window."""

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
    """Every position of the window of output element ``idx`` (unrolled)."""
    if math.prod(kernel) > MAX_WINDOW:
        raise Unsupported(f"a {list(kernel)} window")
    nd = len(kernel)
    strides = list(op.attr("strides") or [1] * nd)
    dil = list(op.attr("dilations") or [1] * nd)
    begin, _ = window_pads(op, in_shape[2:], out_shape[2:], kernel)
    for offs in itertools.product(*(range(k) for k in kernel)):
        pos = tuple(add(mul(idx[2 + a], strides[a]), str(offs[a] * dil[a] - begin[a]))
                    for a in range(nd))  # fmt: skip
        inside = p.bind(" & ".join(f"({q} >= 0) & ({q} < {in_shape[2 + a]})"
                                   for a, q in enumerate(pos)), "inside")  # fmt: skip
        yield _Tap(offs, pos, inside)


def _pool(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    if len([o for o in op.outputs if o]) > 1:
        raise Unsupported("MaxPool's indices output")
    x = op.inputs[0]
    in_shape, out_shape = p.io.shape(x), p.io.shape(t)
    kernel = list(op.attr("kernel_shape"))
    begin, end = window_pads(op, in_shape[2:], out_shape[2:], kernel)
    is_max = op.op_type == "MaxPool"
    acc, count = "", ""
    for tap in _taps(p, op, idx, in_shape, out_shape, kernel):
        v = p.value(x, (idx[0], idx[1], *tap.position), p.bind(f"{mask} & {tap.inside}", "mask"))
        fill = "float('-inf')" if is_max else "0.0"
        term = f"tl.where({tap.inside}, {v}, {fill})"
        if is_max:
            acc = p.bind(f"tl.maximum({acc}, {term})" if acc else term, "pool")
            continue
        acc = p.bind(f"{acc} + {term}" if acc else term, "pool")
        counted = tap.inside
        if op.attr("count_include_pad", 0):  # the padding counts, a ceil-mode overhang not
            counted = " & ".join(f"({q} >= {-begin[a]}) & ({q} < {in_shape[2 + a] + end[a]})"
                                 for a, q in enumerate(tap.position))  # fmt: skip
        one = f"tl.where({counted}, 1.0, 0.0)"
        count = p.bind(f"{count} + {one}" if count else one, "n")
    return acc if is_max else f"{acc} / tl.maximum({count}, 1.0)"


def is_depthwise(op: Op, weight_shape: Sequence[int]) -> bool:
    """A convolution of one input channel per group: vector work, read as a window."""
    return op.op_type == "Conv" and len(weight_shape) > 2 and weight_shape[1] == 1


def _depthwise(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    x, w = op.inputs[0], op.inputs[1]
    in_shape, out_shape, w_shape = p.io.shape(x), p.io.shape(t), p.io.shape(w)
    if not is_depthwise(op, w_shape):
        raise Unsupported("a Conv is read off its tile")
    per_group = out_shape[1] // int(op.attr("group", 1))
    channel = idx[1] if per_group == 1 else f"{paren(idx[1])} // {per_group}"
    acc = ""
    for tap in _taps(p, op, idx, in_shape, out_shape, w_shape[2:]):
        read = p.bind(f"{mask} & {tap.inside}", "mask")
        v = p.value(x, (idx[0], channel, *tap.position), read)
        wv = p.value(w, (idx[1], "0", *(str(o) for o in tap.offsets)), mask)
        term = f"tl.where({tap.inside}, {v} * {wv}, 0.0)"
        acc = p.bind(f"{acc} + {term}" if acc else term, "conv")
    if len(op.inputs) > 2 and op.inputs[2]:
        return f"{acc} + {p.value(op.inputs[2], (idx[1],), mask)}"
    return acc


WINDOW_HANDLERS: dict[str, Callable[[Reader, Op, str, Index, str], str]] = {
    "MaxPool": _pool,
    "AveragePool": _pool,
    "Conv": _depthwise,
}
