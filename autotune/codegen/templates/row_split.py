"""The row split of a group's reductions: which ops reduce what (every reduction reduces
trailing axes of a tensor of one R x C split: R rows, the kept dims; C columns, the reduced
dims), the statistics each keeps, and where each output of the group lies on that grid (one
value per row, the grid itself, or picked from it by a constant Gather or Slice: a class
token). A value that reads a reduction must read it on its own row (``Rows.check``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import (
    Index,
    broadcast_index,
    numel,
    same_index,
    sample,
    unflatten,
)
from autotune.codegen.pull import Anchor, KernelIO, Pull
from autotune.codegen.scalar_ops import is_float
from autotune.codegen.templates.placement import Placed, placed
from search_space.ir import FusionGroup, Graph, Op

__all__ = [
    "REDUCTIONS",
    "ROW_RESULT",
    "STATS",
    "Reduction",
    "Rows",
    "reduction_rows",
    "split_index",
]

# op -> statistics (name, combine, per-element term); {x} is the input, {<name>} an earlier
# statistic of the same op (already final)
STATS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "ReduceSum": (("s", "sum", "{x}"),),
    "ReduceMean": (("s", "sum", "{x}"),),
    "ReduceSumSquare": (("s", "sum", "{x} * {x}"),),
    "ReduceL1": (("s", "sum", "tl.abs({x})"),),
    "ReduceL2": (("s", "sum", "{x} * {x}"),),
    "ReduceMax": (("m", "max", "{x}"),),
    "ReduceMin": (("m", "min", "{x}"),),
    "ReduceLogSumExp": (("m", "max", "{x}"), ("s", "sum", "tl.exp({x} - {m})")),
    "GlobalAveragePool": (("s", "sum", "{x}"),),
    "GlobalMaxPool": (("m", "max", "{x}"),),
    "Softmax": (("m", "max", "{x}"), ("s", "sum", "tl.exp({x} - {m})")),
    "LogSoftmax": (("m", "max", "{x}"), ("s", "sum", "tl.exp({x} - {m})")),
    "LayerNormalization": (("mu", "mean", "{x}"), ("var", "mean", "({x} - {mu}) * ({x} - {mu})")),
    "RMSNormalization": (("ms", "mean", "{x} * {x}"),),
}
REDUCTIONS = frozenset(STATS)
ROW_RESULT = {
    "ReduceSum": "{s}",
    "ReduceMean": "{s} / {C}",
    "ReduceSumSquare": "{s}",
    "ReduceL1": "{s}",
    "ReduceL2": "tl.sqrt({s})",
    "ReduceMax": "{m}",
    "ReduceMin": "{m}",
    "ReduceLogSumExp": "tl.log({s}) + {m}",
    "GlobalAveragePool": "{s} / {C}",
    "GlobalMaxPool": "{m}",
}


@dataclass(frozen=True)
class Reduction:
    """One reduction op: the tensor it reduces, its shape, and its first reduced axis."""

    op: Op
    x: str
    shape: tuple[int, ...]
    k: int

    @property
    def rows(self) -> int:
        return math.prod(self.shape[: self.k])

    @property
    def cols(self) -> int:
        return math.prod(self.shape[self.k :])


def _axes(op: Op, io: KernelIO, rank: int) -> list[int]:
    t = op.op_type
    if t in ("GlobalAveragePool", "GlobalMaxPool"):
        return list(range(2, rank))
    if t in ("Softmax", "LogSoftmax"):
        if io.graph.opset < 13:  # the input flattened at axis (default 1): all axes after it
            return list(range(int(op.attr("axis", 1)) % rank, rank))
        return [int(op.attr("axis", -1)) % rank]
    if t in ("LayerNormalization", "RMSNormalization"):
        return list(range(int(op.attr("axis", -1)) % rank, rank))
    axes = op.attr("axes")
    if axes is None and len(op.inputs) > 1 and op.inputs[1]:
        axes = io.constant(op.inputs[1]).astype(np.int64).ravel().tolist()
    if not axes:
        if op.attr("noop_with_empty_axes", 0):
            raise Unsupported(f"{t} with no axes and noop_with_empty_axes")
        return list(range(rank))
    return sorted(int(a) % rank for a in axes)


def _reduction(op: Op, io: KernelIO) -> Reduction:
    x = op.inputs[0]
    shape = io.shape(x)
    if not is_float(io.dtype(x)):
        raise Unsupported(f"{op.op_type} of {io.dtype(x)} values")
    axes = set(_axes(op, io, len(shape)))
    kept = [i for i in range(len(shape)) if i not in axes and shape[i] != 1]
    reduced = [i for i in axes if shape[i] != 1]
    if kept and reduced and max(kept) > min(reduced):
        raise Unsupported(f"{op.op_type} over axes {sorted(axes)} that are not the last")
    # the R x C split: C spans the reduced dims of more than one element (dims of 1 move
    # freely), so a reduction over dims of 1 alone has C = 1
    k = min(reduced) if reduced else len(shape)
    return Reduction(op, x, shape, k)


def split_index(shape: tuple[int, ...], rows: int, cols: int) -> Index:
    """The index of element (r, c) of a tensor of R x C elements, rows first."""
    acc = 1
    for k in range(len(shape) + 1):
        if acc == rows and math.prod(shape[k:]) == cols:
            return unflatten("r", shape[:k]) + unflatten("c", shape[k:])
        if k < len(shape):
            acc *= shape[k]
    return unflatten(f"r * {cols} + c", shape)


class Rows:
    """The statistics of one row block, and how a value reads a reduction's result."""

    def __init__(
        self, reds: list[Reduction], io: KernelIO, picked: dict[str, Placed] | None = None
    ):
        self.reds, self.io, self.R, self.C = reds, io, reds[0].rows, reds[0].cols
        self.picked = picked or {}  # outputs picked from the R x C grid, where they lie
        self.inputs: dict[str, Anchor] = {}  # how a template reads its own inputs back
        self.stats: dict[tuple[str, str], str] = {}
        r, c = sample(self.R, 97), sample(self.C, 97)
        self.env = {"r": r[:, None], "c": c[None, :]}

    def per_row(self, t: str) -> bool:
        """Whether output ``t`` is one value per row (a statistic, or what is made from one):
        R elements, not the grid, and not picked from it (a class token may have R too)."""
        n = numel(self.io.shape(t))
        return n == self.R and n != self.R * self.C and t not in self.picked

    def check(self, idx: Index, expected: Index, what: str) -> None:
        if not same_index(idx, expected, self.env):
            raise Unsupported(f"{what} is read off its row")

    def anchors(self) -> dict[str, Anchor]:
        out: dict[str, Anchor] = dict(self.inputs)
        for red in self.reds:
            if (red.op.name, STATS[red.op.op_type][-1][0]) not in self.stats:
                continue  # not computed yet: a later reduction
            out[red.op.outputs[0]] = self._resolver(red, red.op.outputs[0])
            if len([t for t in red.op.outputs if t]) > 1:
                raise Unsupported(f"{red.op.op_type}'s statistics outputs")
        return out

    def _resolver(self, red: Reduction, t: str) -> Anchor:
        def resolve(pull: Pull, idx: Index, mask: str) -> str:
            if red.op.op_type in ROW_RESULT:
                self.check(idx, unflatten("r", self.io.shape(t)), f"{red.op.op_type} result")
                return self.final(red)
            self.check(idx, split_index(self.io.shape(t), self.R, self.C), red.op.op_type)
            return self.normalised(red, pull, idx, mask)

        return resolve

    def final(self, red: Reduction) -> str:
        names = {k: self.stats[(red.op.name, k)] for k, _, _ in STATS[red.op.op_type]}
        return ROW_RESULT[red.op.op_type].format(C=float(red.cols), **names)

    def normalised(self, red: Reduction, pull: Pull, idx: Index, mask: str) -> str:
        op, st = red.op, {k: self.stats[(red.op.name, k)] for k, _, _ in STATS[red.op.op_type]}
        x = pull.value(red.x, idx, mask)
        if op.op_type == "Softmax":
            return f"tl.exp({x} - {st['m']}) / {st['s']}"
        if op.op_type == "LogSoftmax":
            return f"{x} - {st['m']} - tl.log({st['s']})"
        eps = float(op.attr("epsilon", 1e-5))
        norm_shape = red.shape[red.k :]
        scale = self._param(pull, op, 1, idx[red.k :], norm_shape, mask)
        if op.op_type == "RMSNormalization":
            return f"{x} / tl.sqrt({st['ms']} + {eps!r}) * {scale}"
        out = f"({x} - {st['mu']}) / tl.sqrt({st['var']} + {eps!r}) * {scale}"
        if len(op.inputs) > 2 and op.inputs[2]:
            out += f" + {self._param(pull, op, 2, idx[red.k :], norm_shape, mask)}"
        return out

    def _param(
        self, pull: Pull, op: Op, pos: int, idx: Index, shape: tuple[int, ...], mask: str
    ) -> str:
        t = op.inputs[pos]
        return pull.value(t, broadcast_index(idx, shape, self.io.shape(t)), mask)


def _picked(reds: list[Reduction], io: KernelIO, t: str) -> Placed | None:
    """Where output ``t`` holds an element of the R x C grid it is picked from (a row taken
    by a constant Gather or a Slice after the norm: a class token), if it is."""
    first = reds[0]
    for red in reds:
        for grid in (red.x, red.op.outputs[0]):
            if numel(io.shape(grid)) == first.rows * first.cols:
                index = split_index(io.shape(grid), first.rows, first.cols)
                where = placed(io, t, grid, index)
                if where is not None:
                    return where
    return None


def _reductions(
    graph: Graph, group: FusionGroup, io: KernelIO
) -> tuple[list[Reduction], dict[str, Placed]]:
    """The group's reductions, and its outputs picked from their R x C grid."""
    reds = [_reduction(graph.op(o), io) for o in group.ops if graph.op(o).op_type in REDUCTIONS]
    first = reds[0]
    for red in reds[1:]:
        if (red.rows, red.cols) != (first.rows, first.cols):
            raise Unsupported(
                f"reductions of {first.rows}x{first.cols} and {red.rows}x{red.cols} elements"
            )
    picked = {}
    for t in group.outputs:
        n = numel(io.shape(t))
        if n == first.rows * first.cols:
            continue
        where = _picked(reds, io, t)
        if where is not None:
            picked[t] = where
        elif n != first.rows:
            raise Unsupported(f"output '{t}' of {n} elements in a {first.rows}-row reduction")
    return reds, picked


def reduction_rows(graph: Graph, group: FusionGroup, io: KernelIO) -> Rows:
    """The group's reductions, all of one R x C row split (``Rows.R``, ``Rows.C``).

    Raises:
        Unsupported: reductions over leading axes or of different row splits, or an output
            of neither R nor R x C elements nor picked from the R x C grid.
    """
    reds, picked = _reductions(graph, group, io)
    return Rows(reds, io, picked)
