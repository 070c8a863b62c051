"""Row reductions and norms (ReduceSum/Mean/Max/..., Softmax, LayerNorm, RMSNorm, global
pooling) with the elementwise and layout ops around them.

Every reduction of the group reduces trailing axes of a tensor of the same R x C split: R
rows (the kept dims), C columns (the reduced dims). Each program takes tiles of ``TILE_R``
rows (the plan's ``ub_rows``). When a row fits the plan's UB tile (``ub_cols >= C``) the whole
row is read once and every statistic and output is computed from it (a persistent reduction);
otherwise each statistic is a loop over ``TILE_C`` columns and the outputs a last loop, each
reading its inputs again (two-pass mean and variance, as a numerically careful norm does).
A value that reads a reduction must read it on its own row; anything else (a softmax over a
transposed copy) is refused and the group runs as its ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import (
    Index,
    broadcast_index,
    numel,
    offset,
    same_index,
    sample,
    unflatten,
)
from autotune.codegen.pull import Anchor, KernelIO, Pull, lanes
from autotune.codegen.scalar_ops import is_float
from autotune.codegen.source import Body, paren
from autotune.codegen.templates.common import (
    KernelSource,
    check_outputs,
    finish,
    kernel_io,
    next_pow2,
    store,
)
from autotune.codegen.templates.placement import Placed, guarded, placed, placed_value
from search_space.ir import FusionGroup, Graph, KernelConfig, Op

__all__ = [
    "REDUCTIONS",
    "ROW_RESULT",
    "STATS",
    "Rows",
    "reduction_kernel",
    "reduction_rows",
    "row_constexprs",
    "rows_body",
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
LANES = lanes(
    {"R": (0, "BLOCK_R"), "C": (1, "BLOCK_C")},
    r="R",
    lane_r="R",
    rmask="R",
    c="C",
    lane_c="C",
    mask="RC",
)
_INIT = {"sum": "0.0", "mean": "0.0", "max": "float('-inf')", "min": "float('inf')"}


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


def split_index(shape: tuple[int, ...], rows: int, cols: int, r: str = "r", c: str = "c") -> Index:
    """The index of element (``r``, ``c``) of a tensor of R x C elements, rows first."""
    acc = 1
    for k in range(len(shape) + 1):
        if acc == rows and math.prod(shape[k:]) == cols:
            return unflatten(r, shape[:k]) + unflatten(c, shape[k:])
        if k < len(shape):
            acc *= shape[k]
    return unflatten(f"{paren(r)} * {cols} + {c}", shape)


class Rows:
    """The statistics of one row block, and how a value reads a reduction's result."""

    def __init__(self, reds: list[Reduction], io: KernelIO, rows: int, cols: int):
        self.reds, self.io, self.R, self.C = reds, io, rows, cols
        self.inputs: dict[str, Anchor] = {}  # how a template reads its own inputs back
        self.stats: dict[tuple[str, str], str] = {}
        r, c = sample(rows, 97), sample(cols, 97)
        self.env = {"r": r[:, None], "c": c[None, :]}

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


def _term(rows: Rows, red: Reduction, pull: Pull, stat: int, mask: str) -> str:
    _, _, text = STATS[red.op.op_type][stat]
    x = pull.value(red.x, split_index(red.shape, rows.R, rows.C), mask)
    earlier = {k: rows.stats[(red.op.name, k)] for k, _, _ in STATS[red.op.op_type][:stat]}
    return text.format(x=x, **earlier)


def _combine(how: str, acc: str, term: str, mask: str) -> str:
    masked = f"tl.where({mask}, {term}, {_INIT[how]})"
    if how in ("sum", "mean"):
        return f"{acc} + {masked}"
    return f"tl.{'maximum' if how == 'max' else 'minimum'}({acc}, {masked})"


def _finish(how: str, acc: str, cols: int) -> str:
    fn = {"sum": "tl.sum", "mean": "tl.sum", "max": "tl.max", "min": "tl.min"}[how]
    total = f"{fn}({acc}, axis=1)[:, None]"
    return f"{total} / {float(cols)}" if how == "mean" else total


def _persistent_stats(rows: Rows, row: Body) -> Pull:
    row.line("c = lane_c")
    row.line(f"mask = rmask & (c < {rows.C})")
    pull = Pull(rows.io, row, LANES)
    for red in rows.reds:
        for i, (key, how, _) in enumerate(STATS[red.op.op_type]):
            pull.anchors = rows.anchors()
            term = _term(rows, red, pull, i, "mask")
            init = f"tl.full([BLOCK_R, BLOCK_C], {_INIT[how]}, tl.float32)"
            acc = row.bind(_combine(how, init, term, "mask"), "a")
            rows.stats[(red.op.name, key)] = row.bind(_finish(how, acc, rows.C), key)
    pull.anchors = rows.anchors()
    return pull


def _chunk(rows: Rows, row: Body) -> tuple[Body, Pull]:
    inner = row.child()
    inner.line("c = c0 + lane_c")
    inner.line(f"mask = rmask & (lane_c < TILE_C) & (c < {rows.C})")
    return inner, Pull(rows.io, inner, LANES, rows.anchors())


def _looped_stats(rows: Rows, row: Body) -> None:
    for red in rows.reds:
        for i, (key, how, _) in enumerate(STATS[red.op.op_type]):
            acc = f"acc{len(rows.stats)}"
            row.line(f"{acc} = tl.full([BLOCK_R, BLOCK_C], {_INIT[how]}, tl.float32)")
            inner, pull = _chunk(rows, row)
            inner.line(f"{acc} = {_combine(how, acc, _term(rows, red, pull, i, 'mask'), 'mask')}")
            row.nest(f"for c0 in range(0, {rows.C}, TILE_C):", inner)
            rows.stats[(red.op.name, key)] = row.bind(_finish(how, acc, rows.C), key)


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


def _per_row(rows: Rows, t: str) -> bool:
    """One value per row (a statistic, or what is made from one): R elements, not the grid,
    and not picked from it (a class token may have R elements too)."""
    n = numel(rows.io.shape(t))
    return n == rows.R and n != rows.R * rows.C and _picked(rows.reds, rows.io, t) is None


def _store_outputs(
    rows: Rows, io: KernelIO, outs: list[tuple[int, str]], body: Body, pull: Pull
) -> None:
    for pos, t in outs:
        shape = io.shape(t)
        if _per_row(rows, t):
            where, mask = Placed(unflatten("r", shape)), "rmask"
        elif numel(shape) == rows.R * rows.C:
            where, mask = Placed(split_index(shape, rows.R, rows.C)), "mask"
        else:
            picked = _picked(rows.reds, io, t)
            assert picked is not None  # _reductions refused any other output
            where, mask = picked, guarded(pull, "mask", picked.guards)
        value = placed_value(pull, where, t, mask)
        ptr = pull.pointer(f"out{pos}", offset(where.index, shape), mask)
        body.line(store(ptr, io.dtype(t), value, mask))


def _reductions(graph: Graph, group: FusionGroup, io: KernelIO) -> list[Reduction]:
    reds = [_reduction(graph.op(o), io) for o in group.ops if graph.op(o).op_type in REDUCTIONS]
    first = reds[0]
    for red in reds[1:]:
        if (red.rows, red.cols) != (first.rows, first.cols):
            raise Unsupported(
                f"reductions of {first.rows}x{first.cols} and {red.rows}x{red.cols} elements"
            )
    for t in group.outputs:
        n = numel(io.shape(t))
        if n not in (first.rows * first.cols, first.rows) and _picked(reds, io, t) is None:
            raise Unsupported(f"output '{t}' of {n} elements in a {first.rows}-row reduction")
    return reds


def reduction_rows(graph: Graph, group: FusionGroup, io: KernelIO) -> Rows:
    """The group's reductions, all of one R x C row split (``Rows.R``, ``Rows.C``).

    Raises:
        Unsupported: reductions over leading axes or of different row splits, or an output
            of neither R nor R x C elements nor picked from the R x C grid.
    """
    reds = _reductions(graph, group, io)
    return Rows(reds, io, reds[0].rows, reds[0].cols)


def rows_body(
    rows: Rows, outs: list[tuple[int, str]], tile_c: int, row: Body, first: str, valid: str
) -> None:
    """One block of ``TILE_R`` rows (``first`` the index of its first row, ``valid`` the
    condition on ``lane_r`` that a row exists): the statistics, then ``outs`` (position,
    tensor) stored; a row of more than ``tile_c`` columns is read in chunks of ``TILE_C``."""
    io = rows.io
    row.line("lane_r = tl.arange(0, BLOCK_R)[:, None]")
    row.line("lane_c = tl.arange(0, BLOCK_C)[None, :]")
    row.line(f"r = {first} + lane_r")
    row.line(f"rmask = (lane_r < TILE_R) & ({valid})")
    per_row = [(p, t) for p, t in outs if _per_row(rows, t)]
    full = [o for o in outs if o not in per_row]  # stored a column chunk at a time
    if tile_c >= rows.C:
        pull = _persistent_stats(rows, row)
        _store_outputs(rows, io, outs, row, pull)
        return
    _looped_stats(rows, row)
    if full:
        inner, chunk_pull = _chunk(rows, row)
        _store_outputs(rows, io, full, inner, chunk_pull)
        row.nest(f"for c0 in range(0, {rows.C}, TILE_C):", inner)
    _store_outputs(rows, io, per_row, row, Pull(io, row, LANES, rows.anchors()))


def reduction_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig
) -> KernelSource:
    """The kernel of a group with one or more row reductions.

    Raises:
        Unsupported: reductions over leading axes, of different row splits, or read off
            their rows; an op no template computes.
    """
    check_outputs(graph, group.outputs)
    io = kernel_io(graph, group)
    rows = reduction_rows(graph, group, io)
    tile_r = max(1, min(config.ub_rows or 1, rows.R))
    tile_c = max(1, min(config.ub_cols or rows.C, rows.C))
    body = Body(1)
    row = body.child()
    outs = list(enumerate(group.outputs))
    rows_body(rows, outs, tile_c, row, "tile * TILE_R", f"r < {rows.R}")
    tiles = math.ceil(rows.R / tile_r)
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    return finish(name, graph, group, config, io, body, tiles,
                  row_constexprs(tile_r, next_pow2(tile_r), tile_c), "reduction")  # fmt: skip


def row_constexprs(tile_r: int, block_r: int, tile_c: int) -> tuple[tuple[str, int], ...]:
    """``TILE_R``/``BLOCK_R`` rows and ``TILE_C``/``BLOCK_C`` columns of a row block."""
    return (("TILE_R", tile_r), ("BLOCK_R", block_r),
            ("TILE_C", tile_c), ("BLOCK_C", next_pow2(tile_c)))  # fmt: skip
