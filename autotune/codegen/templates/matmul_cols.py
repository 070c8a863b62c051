"""A matmul whose epilogue reduces its columns' worth of rows: a convolution and the global
pooling after it (ResNet's last block and its average pool, MobileNet's last 1x1 conv and its
pool), as one kernel.

In implicit GEMM a convolution's product has the pixels as rows (M) and the channels as
columns (N), so a global pooling sums every row of a column: the reduction's rows are the
product's (batch, column) pairs and its columns the product's rows. Each program owns a tile
of ``TILE_N`` columns of one image (a block of the product's rows) of one batch and runs the
matmul over every ``TILE_M`` row tile of the image
(the K loop, then the epilogue ops up to the reduction), folding each tile's rows into one
running statistic per column; after the last row tile it computes the reduction's result and
what follows it, and stores them. Nothing is handed off through memory: the statistic stays
in registers, and only the group's outputs are written. Reductions of one statistic (sums,
means, maxima, norms) take this form; a softmax or a norm over the pixels needs the row again
and is refused.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, evaluate, numel, offset, sample, substitute, unflatten
from autotune.codegen.pull import Pull
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    check_outputs,
    finish,
    store,
)
from autotune.codegen.templates.matmul import LANES as MATMUL_LANES
from autotune.codegen.templates.matmul import (
    cube_constexprs,
    cube_tiles,
    dot_dtype,
    tile_body,
)
from autotune.codegen.templates.matmul_rows import split_at_reduction
from autotune.codegen.templates.phases import Phases
from autotune.codegen.templates.placement import placed_index
from autotune.codegen.templates.products import Product
from autotune.codegen.templates.row_split import ROW_RESULT, STATS, reduction_rows
from search_space.ir import FusionGroup, Graph, KernelConfig

__all__ = ["Columns", "columns_of", "matmul_cols_kernel"]

# the matmul's lanes, and the reduction's row r (one per product column) along N
LANES = MATMUL_LANES.naming(r="N")
# how a single-statistic reduction (ROW_RESULT's) folds a tile's rows into its statistic
_FOLD = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}
_START = {"sum": "0.0", "max": "float('-inf')", "min": "float('inf')"}


class Columns:
    """The group cut at its first reduction, its products and its reductions. Product row
    ``m`` is pixel ``m % C`` of block ``m // C`` (an image); ``row`` is every reduction's row
    of product element (b, m, n), in b, n and the block ``i`` (set by ``reads_columns``).

    Raises:
        Unsupported: what the phases or the reduction template refuse.
    """

    def __init__(self, name: str, graph: Graph, group: FusionGroup, precision: str):
        head, tail = split_at_reduction(graph, group)
        ph = Phases(name, graph, group, head, tail, precision, "a pooling")
        self.io, self.head_io, self.prods, self.head = ph.io, ph.head_io, ph.prods, head
        self.rows = reduction_rows(graph, tail, ph.io)
        self.blocks = self.prods[0].M // self.rows.C
        self.row = ""
        self.tiles: dict[str, Index] = {}  # each reduction's input at the tile's elements

    def reads_columns(self) -> bool:
        """Whether every reduction reads product element (b, m, n) at its column ``m % C``
        and at a row that (b, ``m // C``, n) alone names: one program's column tile of one
        block then holds whole rows of the reduction."""
        first, C = self.prods[0], self.rows.C
        if first.M % C:
            return False
        if any(
            len(STATS[r.op.op_type]) != 1 or r.op.op_type not in ROW_RESULT for r in self.rows.reds
        ):
            return False  # a softmax or a norm writes its whole row
        if self.rows.R != first.nb * self.blocks * first.N:
            return False
        env = _grid(first.nb, self.blocks, C, first.N)
        rows: list[str] = []
        for red in self.rows.reds:
            own = first.out_index(self.io.shape(first.out))
            tile = placed_index(self.head_io, red.x, first.out, own)
            if tile is None:
                return False
            row = offset(tile[: red.k], red.shape[: red.k])
            col = offset(tile[red.k :], red.shape[red.k :])
            if not (_is_pixel(col, env) and _names_rows_apart(row, env, self.rows.R)):
                return False
            if rows and not _is_same(row, rows[0], env):
                return False  # one program stores every reduction's row at one index
            rows.append(row)
            self.tiles[red.op.name] = tile
        (self.row,) = substitute((rows[0],), "m", f"i * {C}")
        return True


def _grid(nb: int, blocks: int, cols: int, n: int) -> dict[str, np.ndarray]:
    """Sample points of (b, block i, pixel p, n) on four axes, and the product row m."""
    env = {
        k: sample(size, 13).reshape([-1 if a == j else 1 for a in range(4)])
        for j, (k, size) in enumerate((("b", nb), ("i", blocks), ("p", cols), ("n", n)))
    }
    env["m"] = env["i"] * cols + env["p"]
    return env


def _at(expr: str, env: dict[str, np.ndarray]) -> np.ndarray | None:
    """``expr`` on the whole grid (None when it is not index arithmetic)."""
    try:
        value = evaluate(expr, env)
    except (ValueError, SyntaxError):
        return None
    full = np.broadcast_shapes(*(v.shape for v in env.values()))
    return np.broadcast_to(value, np.broadcast_shapes(value.shape, full))


def _is_same(a: str, b: str, env: dict[str, np.ndarray]) -> bool:
    got, want = _at(a, env), _at(b, env)
    return got is not None and want is not None and np.array_equal(got, want)


def _is_pixel(col: str, env: dict[str, np.ndarray]) -> bool:
    return _is_same(col, "p", env)


def _names_rows_apart(row: str, env: dict[str, np.ndarray], rows: int) -> bool:
    """``row`` does not change along a block's pixels, and the (b, i, n) points name rows
    apart, every one within the reduction's."""
    got = _at(row, env)
    first = _at(row, {**env, "m": env["m"] - env["p"]})  # the block's first pixel
    if got is None or first is None or not np.array_equal(got, first):
        return False
    starts = first[:, :, 0, :].ravel()
    return bool(
        starts.min() >= 0 and starts.max() < rows and np.unique(starts).size == starts.size
    )


def columns_of(name: str, graph: Graph, group: FusionGroup, precision: str) -> Columns | None:
    """The group cut for :func:`matmul_cols_kernel` when it is a matmul whose reduction's rows
    are the product's columns (a global pooling of a convolution's pixels), else None."""
    try:
        cols = Columns(name, graph, group, precision)
    except Unsupported:
        return None
    return cols if cols.reads_columns() else None


def _fold(cols: Columns, row: Body, inner: Body) -> None:
    """A running statistic per column of the tile (``[1, BLOCK_N]``), started in ``row``
    and folded with each row tile in ``inner``."""
    pull = Pull(cols.head_io, inner, LANES, {p.out: p.result for p in cols.prods})
    for red in cols.rows.reds:
        key, how, term = STATS[red.op.op_type][0]  # one statistic: reads_columns says so
        acc = f"col{len(cols.rows.stats)}"
        row.line(f"{acc} = tl.full([1, BLOCK_N], {_START[how]}, tl.float32)")
        x = pull.value(red.x, cols.tiles[red.op.name], "mask")
        part = f"{_FOLD[how]}(tl.where(mask, {term.format(x=x)}, {_START[how]}), axis=0)[None, :]"
        if how == "sum":
            inner.line(f"{acc} = {acc} + {part}")
        else:
            inner.line(f"{acc} = tl.{'maximum' if how == 'max' else 'minimum'}({acc}, {part})")
        cols.rows.stats[(red.op.name, key)] = acc


def _store_results(cols: Columns, outs: list[tuple[int, str]], row: Body) -> None:
    """The reductions' results and the ops after them, one value per reduction row."""
    row.line(f"r = {cols.row}")
    pull = Pull(cols.io, row, LANES, cols.rows.anchors())
    for pos, t in outs:
        shape = cols.io.shape(t)
        idx = unflatten("r", shape)
        value = pull.value(t, idx, "nmask")
        row.line(
            store(
                pull.pointer(f"out{pos}", offset(idx, shape), "nmask"),
                cols.io.storage(t),
                cols.io.fit(t, value),
                "nmask",
            )
        )


def _lanes(first: Product, cols: int, row: Body, inner: Body) -> None:
    """Column tile ``tn`` of block ``i`` in ``row``; its row tile ``tm`` in ``inner``."""
    row.line("lane_m = tl.arange(0, BLOCK_M)")
    row.line("lane_n = tl.arange(0, BLOCK_N)")
    row.line("lane_k = tl.arange(0, BLOCK_K)")
    row.line("n = tn * TILE_N + lane_n[None, :]")
    row.line(f"nmask = (lane_n[None, :] < TILE_N) & (n < {first.N})")
    inner.line("pixel = tm * TILE_M + lane_m[:, None]")
    inner.line(f"m = i * {cols} + pixel")
    inner.line(f"mmask = (lane_m[:, None] < TILE_M) & (pixel < {cols})")
    inner.line("mask = mmask & nmask")


def _outputs(cols: Columns, group: FusionGroup) -> tuple[list[tuple[int, str]], ...]:
    """The group's outputs (position, tensor) stored from the tile, and those stored once
    per reduction row."""
    first = cols.prods[0]
    on_tile = [(i, t) for i, t in enumerate(group.outputs) if t in cols.head.outputs]
    per_row = [(i, t) for i, t in enumerate(group.outputs) if t not in cols.head.outputs]
    for outs, want in ((on_tile, first.nb * first.M * first.N), (per_row, cols.rows.R)):
        for _, t in outs:
            if numel(cols.io.shape(t)) != want:
                raise Unsupported(f"output '{t}' of neither the product's size nor a pooled one")
    return on_tile, per_row


def matmul_cols_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, cols: Columns
) -> KernelSource:
    """The kernel of a matmul group whose reduction's rows are the product's columns
    (``cols``, from :func:`columns_of`).

    Raises:
        Unsupported: an output of the group that is neither the product's size nor one per
            reduction row, or what the matmul template refuses.
    """
    check_outputs(graph, group.outputs)
    first, C = cols.prods[0], cols.rows.C
    on_tile, per_row = _outputs(cols, group)
    tm, tn, tk = cube_tiles(config, cols.prods)
    tm = min(tm, C)
    tiles_n = math.ceil(first.N / tn)
    body = Body(1)
    row = body.child()
    row.line(f"b = tile // {cols.blocks * tiles_n}")
    row.line(f"i = (tile // {tiles_n}) % {cols.blocks}" if cols.blocks > 1 else "i = 0")
    row.line(f"tn = tile % {tiles_n}")
    inner = row.child()
    _lanes(first, C, row, inner)
    tile_body(cols.prods, cols.head_io, on_tile, inner)
    _fold(cols, row, inner)
    row.nest(f"for tm in range(0, {math.ceil(C / tm)}):", inner)
    _store_results(cols, per_row, row)
    tiles = first.nb * cols.blocks * tiles_n
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    return finish(
        name,
        graph,
        group,
        config,
        cols.io,
        body,
        tiles,
        cube_constexprs(tm, tn, tk),
        "matmul_cols",
        dot_dtype=dot_dtype(cols.head_io, cols.prods),
    )
