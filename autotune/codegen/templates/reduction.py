"""Row reductions and norms (ReduceSum/Mean/Max/..., Softmax, LayerNorm, RMSNorm, global
pooling) with the elementwise and layout ops around them.

Every reduction of the group reduces trailing axes of a tensor of the same R x C split
(``row_split``). Each program takes tiles of ``TILE_R``
rows (the plan's ``ub_rows``). When a row fits the plan's UB tile (``ub_cols >= C``) the whole
row is read once and every statistic and output is computed from it (a persistent reduction);
otherwise each statistic is a loop over ``TILE_C`` columns and the outputs a last loop, each
reading its inputs again (two-pass mean and variance, as a numerically careful norm does).
"""

from __future__ import annotations

import math

from autotune.codegen.indexing import (
    numel,
    offset,
    unflatten,
)
from autotune.codegen.pull import KernelIO, Pull, lanes
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    check_outputs,
    finish,
    kernel_io,
    next_pow2,
    store,
)
from autotune.codegen.templates.placement import Placed, guarded, placed_value
from autotune.codegen.templates.row_split import (
    STATS,
    Reduction,
    Rows,
    reduction_rows,
    split_index,
)
from search_space.ir import FusionGroup, Graph, KernelConfig

__all__ = ["reduction_kernel", "row_constexprs", "rows_body"]

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


def _store_outputs(
    rows: Rows, io: KernelIO, outs: list[tuple[int, str]], body: Body, pull: Pull
) -> None:
    for pos, t in outs:
        shape = io.shape(t)
        if rows.per_row(t):
            where, mask = Placed(unflatten("r", shape)), "rmask"
        elif numel(shape) == rows.R * rows.C:
            where, mask = Placed(split_index(shape, rows.R, rows.C)), "mask"
        else:
            where = rows.picked[t]  # _reductions refused any other output
            mask = guarded(pull, "mask", where.guards)
        value = placed_value(pull, where, t, mask)
        ptr = pull.pointer(f"out{pos}", offset(where.index, shape), mask)
        body.line(store(ptr, io.storage(t), io.fit(t, value), mask))


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
    per_row = [(p, t) for p, t in outs if rows.per_row(t)]
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
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> KernelSource:
    """The kernel of a group with one or more row reductions.

    Raises:
        Unsupported: reductions over leading axes, of different row splits, or read off
            their rows; an op no template computes.
    """
    check_outputs(graph, group.outputs)
    io = kernel_io(graph, group, precision)
    rows = reduction_rows(graph, group, io)
    tile_r = max(1, min(config.ub_rows or 1, rows.R))
    tile_c = max(1, min(config.ub_cols or rows.C, rows.C))
    body = Body(1)
    row = body.child()
    outs = list(enumerate(group.outputs))
    rows_body(rows, outs, tile_c, row, "tile * TILE_R", f"r < {rows.R}")
    tiles = math.ceil(rows.R / tile_r)
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    return finish(
        name,
        graph,
        group,
        config,
        io,
        body,
        tiles,
        row_constexprs(tile_r, next_pow2(tile_r), tile_c),
        "reduction",
    )


def row_constexprs(tile_r: int, block_r: int, tile_c: int) -> tuple[tuple[str, int], ...]:
    """``TILE_R``/``BLOCK_R`` rows and ``TILE_C``/``BLOCK_C`` columns of a row block."""
    return (
        ("TILE_R", tile_r),
        ("BLOCK_R", block_r),
        ("TILE_C", tile_c),
        ("BLOCK_C", next_pow2(tile_c)),
    )
