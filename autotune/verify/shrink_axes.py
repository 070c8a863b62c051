"""How each op carries the row axis a group's verification shrinks (``shrink``'s table).

:func:`out_axis` says where the shrunk axis of an op's inputs lands in its output, or raises
:class:`NotShrinkable` when the op forbids shrinking it (a reduced axis, a matmul's K, a
convolution's channels, a scatter whose indices point past the kept rows).
"""

from __future__ import annotations

import math

import numpy as np

from search_space.exceptions import AutofusionError
from search_space.ir import REDUCE_OPS, Graph, Op, OpClass

__all__ = ["NotShrinkable", "Shape", "out_axis", "reject", "scatter_cut"]

Shape = tuple[int, ...]
_VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
_BATCH_ONLY = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "MaxPool",
        "AveragePool",
        "LpPool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "InstanceNormalization",
        "GroupNormalization",
    }
)
_SPATIAL = frozenset({"Conv", "MaxPool", "AveragePool", "LpPool"})  # windows slide over H, W
_REDUCE = frozenset(t for t in REDUCE_OPS if t.startswith("Reduce"))  # axes-driven reductions


class NotShrinkable(AutofusionError):
    """The group cannot be run on fewer rows this way (the message says why)."""


def reject(op: Op, why: str) -> NotShrinkable:
    return NotShrinkable(f"{op.name} ({op.op_type}) {why}")


def _view_axis(op: Op, src: Shape, dst: Shape, a: int) -> int:
    """The output axis whose outer block starts where input axis ``a`` starts."""
    pre, acc = math.prod(src[:a]), 1
    for j, d in enumerate(dst):
        if acc == pre and d > 1:
            if d % src[a] and src[a] % d:
                break
            return j
        acc *= d
        if acc > pre:
            break
    raise reject(op, f"splits the shrunk axis ({list(src)} -> {list(dst)})")


def _ints(graph: Graph, op: Op, pos: int, attr: str) -> list[int] | None:
    if len(op.inputs) > pos and op.inputs[pos]:
        value = graph.constants.get(op.inputs[pos])
        if value is None:
            raise reject(op, f"reads a run-time '{attr}'")
        return [int(v) for v in np.asarray(value).reshape(-1)]
    got = op.attr(attr)
    return None if got is None else [int(v) for v in got]


def out_axis(graph: Graph, op: Op, ax: dict[int, int]) -> int:
    """Where the tracked axis lands in the op's outputs (raises when the op forbids it)."""
    # Long by design: one case per op family (views, transpose, shape ops, reductions, ...), a
    # dispatch table written out.
    shapes = [graph.tensors[t].static_shape if t else () for t in op.inputs]
    out = graph.tensors[op.outputs[0]].static_shape
    t, rank = op.op_type, len(shapes[0]) if shapes else 0
    a = ax.get(0, -1)
    if t in _VIEWS:
        if set(ax) != {0}:
            raise reject(op, "has a run-time shape")
        return _view_axis(op, shapes[0], out, a)
    if t == "Transpose":
        perm = list(op.attr("perm") or range(rank)[::-1])
        return perm.index(a)
    if t in ("Expand", "Tile", "Pad", "Slice", "Concat", "Split", "Trilu", "CumSum"):
        if set(ax) - {0} and t != "Concat":
            raise reject(op, "has a run-time argument on the shrunk axis")
        if t == "Concat" and len(set(ax.values())) != 1:
            raise reject(op, "concatenates differently shrunk inputs")
        a = next(iter(ax.values()))
        if t == "Expand":
            return len(out) - rank + a
        if t in ("Concat", "Split", "CumSum") and a == (op.attr("axis", 0) % len(out)):
            raise reject(op, "works along the shrunk axis")
        if t == "Slice" and a in {x % rank for x in (_ints(graph, op, 3, "axes") or range(rank))}:
            raise reject(op, "slices the shrunk axis")
        if t == "Trilu" and a >= rank - 2:
            raise reject(op, "works on the shrunk axis")
        if t == "Tile" and (_ints(graph, op, 1, "repeats") or [1] * rank)[a] != 1:
            raise reject(op, "tiles the shrunk axis")
        if t == "Pad" and any(
            (_ints(graph, op, 1, "pads") or [0] * 2 * rank)[k] for k in (a, a + rank)
        ):
            raise reject(op, "pads the shrunk axis")
        return a
    if t == "ScatterND":
        return _scatter_axis(op, ax, shapes)
    if t == "MatMul":
        ra, rb, ro = len(shapes[0]), len(shapes[1]), len(out)
        lands = set()
        if 0 in ax:
            if ra == 1 or ax[0] == ra - 1:
                raise reject(op, "would shrink the contraction axis K")
            lands.add(ro - 2 if ax[0] == ra - 2 else ro - ra + ax[0])
        if 1 in ax:
            if rb == 1 or ax[1] == rb - 2:
                raise reject(op, "would shrink the contraction axis K")
            lands.add(ro - 1 if ax[1] == rb - 1 else ro - rb + ax[1])
        if len(lands) != 1:
            raise reject(op, "operands shrink different axes")
        return lands.pop()
    if t == "Gemm":
        if set(ax) != {0} or a != (1 if op.attr("transA", 0) else 0):
            raise reject(op, "would shrink K or a weight")
        return 0
    if t in _SPATIAL and set(ax) == {0} and a >= 2:
        return a  # a crop of the image: each output still sums all channels x the window
    if t in _BATCH_ONLY:
        if set(ax) != {0} or a != 0:
            raise reject(op, "can only lose batch rows or, sliding a window, image rows")
        return 0
    if t == "BatchNormalization":
        if set(ax) != {0} or a == 1:
            raise reject(op, "would shrink channels")
        return a
    if t in ("Softmax", "LogSoftmax", "Hardmax"):
        axis = op.attr("axis", -1 if graph.opset >= 13 else 1) % rank
        if a == axis or (graph.opset < 13 and a >= axis):
            raise reject(op, "reduces along the shrunk axis")
        return a
    if t == "LayerNormalization":
        if a >= op.attr("axis", -1) % rank:
            raise reject(op, "normalises along the shrunk axis")
        return a
    if t in _REDUCE or t in ("ArgMax", "ArgMin"):
        pos = 1 if t == "ReduceSum" or graph.opset >= 18 else 99
        axes = _ints(graph, op, pos, "axes") if t in _REDUCE else [op.attr("axis", 0)]
        norm = sorted({x % rank for x in axes} if axes else range(rank))
        if a in norm:
            raise reject(op, "reduces along the shrunk axis")
        return a if op.attr("keepdims", 1) else a - sum(1 for x in norm if x < a)
    if t == "Gather":
        axis = op.attr("axis", 0) % rank
        if len(ax) != 1 or (0 in ax and a == axis):
            raise reject(op, "gathers along the shrunk axis")
        if 0 in ax:
            return a if a < axis else a + len(shapes[1]) - 1
        return axis + ax[1]
    if op.op_class is OpClass.ELEMENTWISE:
        lands = {len(out) - len(shapes[p]) + x for p, x in ax.items()}
        if len(lands) != 1:
            raise reject(op, "broadcasts differently shrunk inputs")
        return lands.pop()
    if set(ax) == {0} and a == 0 and out and shapes[0] and out[0] == shapes[0][0]:
        return 0  # an op we do not know, keeping its batch axis
    raise reject(op, "is not known to keep the shrunk axis apart")


def _scatter_axis(op: Op, ax: dict[int, int], shapes: list[Shape]) -> int:
    """ScatterND writes ``updates[i]`` at ``data[indices[i]]`` (indices [.., k]): data and
    updates shrink together, an indexed axis of data (< k) with an axis of the indices' batch
    (the walk cuts the compile-time indices there and checks they stay inside the kept rows),
    a sliced axis of data (>= k) with the same axis of the updates' slices."""
    if 1 in ax:
        raise reject(op, "has run-time indices on the shrunk axis")
    if 0 not in ax or 2 not in ax:
        raise reject(op, "would shrink its data or its updates alone")
    a, j = ax[0], ax[2]
    k, batch = shapes[1][-1], len(shapes[1]) - 1
    if (a < k and j >= batch) or (a >= k and j != batch + a - k):
        raise reject(op, "shrinks an axis of its updates that does not index the shrunk one")
    return a


def scatter_cut(graph: Graph, op: Op, ax: dict[int, int], rows: int, kept: int) -> int | None:
    """The indices' axis a ScatterND's shrink cuts to the first ``rows`` positions (None when
    its shrunk axis is a sliced one, which leaves the indices alone).

    Raises:
        NotShrinkable: the indices are computed at run time, or a kept index points past the
            ``kept`` rows of data's shrunk axis.
    """
    a, j = ax[0], ax[2]
    indices = graph.constants.get(op.inputs[1])
    if a >= graph.tensors[op.inputs[1]].static_shape[-1]:
        return None
    if indices is None:
        raise reject(op, "has run-time indices")
    first = np.take(np.asarray(indices), np.arange(rows), axis=j)[..., a]
    extent = graph.tensors[op.inputs[0]].static_shape[a]
    first = np.where(first < 0, first + extent, first)  # ONNX counts negative ones from the end
    if first.size and not ((first >= 0) & (first < kept)).all():
        raise reject(op, "has indices past the kept rows")
    return j
