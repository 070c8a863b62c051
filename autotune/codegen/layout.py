"""How layout ops read their input: views, Transpose, Expand, Slice, Concat, Split, Gather,
and the per-channel BatchNormalization (an op handler gets the index of its output and asks
its inputs at the indices it reads)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, add, broadcast_index, evaluate, mul, reshape_index
from autotune.codegen.kernel_io import KernelIO, Reader
from autotune.codegen.scalar_ops import cast_expr, onnx_dtype
from autotune.codegen.source import paren
from search_space.ir import VIEW_OPS, Op

__all__ = ["LAYOUT_HANDLERS", "Handler", "slice_params", "split_start"]

Handler = Callable[[Reader, Op, str, Index, str], str]


def _view(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    src = op.inputs[0]
    return p.value(src, reshape_index(idx, p.io.shape(t), p.io.shape(src)), mask)


def _cast(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    src = op.inputs[0]
    to = onnx_dtype(int(op.attr("to"))) if op.op_type == "Cast" else p.io.dtype(op.inputs[1])
    return cast_expr(p.value(src, idx, mask), p.io.dtype(src), to)


def _transpose(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    src = op.inputs[0]
    rank = len(p.io.shape(src))
    perm = op.attr("perm") or list(reversed(range(rank)))
    res = ["0"] * rank
    for out_axis, in_axis in enumerate(perm):
        res[in_axis] = idx[out_axis]
    return p.value(src, tuple(res), mask)


def _expand(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    src = op.inputs[0]
    return p.value(src, broadcast_index(idx, p.io.shape(t), p.io.shape(src)), mask)


def slice_params(io: KernelIO, op: Op) -> list[tuple[int, int, int]]:
    """(axis, start, step) per sliced axis of a Slice of constant inputs, normalised as ONNX
    clamps them.

    Raises:
        Unsupported: an input that is not a compile-time constant.
    """
    shape = io.shape(op.inputs[0])
    vals = [
        io.constant(op.inputs[i]).astype(np.int64).ravel().tolist()
        if len(op.inputs) > i and op.inputs[i]
        else None
        for i in range(1, 5)
    ]
    starts, _ends, axes, steps = vals
    axes = axes or list(range(len(starts or [])))
    steps = steps or [1] * len(axes)
    out = []
    for s, a, st in zip(starts or [], axes, steps, strict=True):
        a %= len(shape)
        d = shape[a]
        s = s + d if s < 0 else s
        s = min(max(s, 0), d if st > 0 else d - 1)
        out.append((a, s, st))
    return out


def _slice(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    res = list(idx)
    for axis, start, step in slice_params(p.io, op):
        res[axis] = (
            add(str(start), mul(idx[axis], step))
            if step > 0
            else (f"{start} - {paren(mul(idx[axis], -step))}")
        )
    return p.value(op.inputs[0], tuple(res), mask)


def _inside(p: Reader, at: str, start: int, stop: int) -> bool | None:
    """Whether ``at`` lies in ``[start, stop)`` for every lane the reader's ``env`` lists
    (True), for none (False), or either or unknown (None)."""
    if not p.env:
        return None
    try:
        v = evaluate(at, dict(p.env))
    except (ValueError, SyntaxError):  # a name the env does not list: not known statically
        return None
    inside = (v >= start) & (v < stop)
    return True if inside.all() else False if not inside.any() else None


def _concat(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    rank = len(p.io.shape(t))
    axis = int(op.attr("axis")) % rank
    pieces: list[tuple[str, str]] = []
    start = 0
    for src in op.inputs:
        size = p.io.shape(src)[axis]
        known = _inside(p, idx[axis], start, start + size) if size else False
        if known is False:  # the tile's lanes never read this piece
            start += size
            continue
        local = list(idx)
        local[axis] = add(idx[axis], str(-start)) if start else idx[axis]
        inside = f"({paren(idx[axis])} >= {start}) & ({paren(idx[axis])} < {start + size})"
        if known:  # every lane reads this piece
            return p.value(src, tuple(local), mask)
        cond = p.bind(inside, "inside")
        pieces.append((cond, p.value(src, tuple(local), p.bind(f"{mask} & {cond}", "mask"))))
        start += size
    out = pieces[-1][1]
    for cond, val in reversed(pieces[:-1]):
        out = f"tl.where({cond}, {val}, {out})"
    return out


def split_start(io: KernelIO, op: Op, piece: str) -> tuple[int, int]:
    """The axis a Split cuts and where its output ``piece`` starts along it."""
    axis = int(op.attr("axis", 0)) % len(io.shape(piece))
    return axis, sum(io.shape(o)[axis] for o in op.outputs[: op.outputs.index(piece)])


def _split(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    axis, before = split_start(p.io, op, t)
    res = list(idx)
    res[axis] = add(idx[axis], str(before)) if before else idx[axis]
    return p.value(op.inputs[0], tuple(res), mask)


def _gather(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    data, ind = op.inputs[0], op.inputs[1]
    dshape, ishape = p.io.shape(data), p.io.shape(ind)
    axis = int(op.attr("axis", 0)) % len(dshape)
    at = p.value(ind, tuple(idx[axis : axis + len(ishape)]), mask)
    d = dshape[axis]
    wrapped = p.bind(f"tl.where({at} < 0, {at} + {d}, {at})", "g")
    res = (*idx[:axis], wrapped, *idx[axis + len(ishape) :])
    return p.value(data, tuple(res), mask)


def _batchnorm(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    x = p.value(op.inputs[0], idx, mask)
    ch = (idx[1],) if len(idx) > 1 else ("0",)
    scale, bias, mean, var = (p.operand(op, i, ch, mask) for i in range(1, 5))
    eps = float(op.attr("epsilon", 1e-5))
    return f"({x} - {mean}) / tl.sqrt({var} + {eps!r}) * {scale} + {bias}"


def _dropout(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    if t != op.outputs[0]:
        raise Unsupported("Dropout's mask output")
    return p.value(op.inputs[0], idx, mask)


LAYOUT_HANDLERS: dict[str, Handler] = {
    **{v: _view for v in VIEW_OPS},
    "Cast": _cast,
    "CastLike": _cast,
    "Transpose": _transpose,
    "Expand": _expand,
    "Slice": _slice,
    "Concat": _concat,
    "Split": _split,
    "Gather": _gather,
    "BatchNormalization": _batchnorm,
    "Dropout": _dropout,
}
