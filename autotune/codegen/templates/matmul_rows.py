"""A matmul whose epilogue reduces its rows: a projection and the norm after it (bias, residual
and LayerNorm; the residual and RMSNorm of Llama), a classifier and its softmax, as one kernel.

A row reduction needs a whole row of the product before it writes an element, and a row spans
every N tile. So each program owns blocks of ``TILE_M`` rows (the plan's ``base_m``) of one
batch: for each N tile of its block it runs the matmul (the K loop, then the epilogue ops up to
the reduction) and stores what the reduction reads (into a scratch buffer, unless the group
outputs it); then, after a barrier, it runs the row reduction over the block's rows, reading
them back ``TILE_C`` (half of ``TILE_N``) columns at a time, or the whole row at once when it
is no wider. This is the cost model's mixed kernel with a full-row epilogue
(``CubeWork.full_row``): the hand-off crosses from the cube's accumulator to the vector side
through memory, as on a split 910B, and the vector side holds half a cube tile at a time.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import numel, sample
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    block_of,
    check_outputs,
)
from autotune.codegen.templates.matmul import (
    PRODUCTS,
    cube_constexprs,
    cube_tiles,
    tile_body,
    tile_lanes,
)
from autotune.codegen.templates.phases import Phases
from autotune.codegen.templates.products import Product
from autotune.codegen.templates.reduction import row_constexprs, rows_body
from autotune.codegen.templates.row_split import REDUCTIONS, reduction_rows
from search_space.ir import FusionGroup, Graph, KernelConfig, make_group

__all__ = ["matmul_rows_kernel", "split_at_reduction"]


def split_at_reduction(graph: Graph, group: FusionGroup) -> tuple[FusionGroup, FusionGroup]:
    """The group's ops before its first reduction (the matmul and its epilogue up to the
    reduction) and from it on (the reduction and what follows it)."""
    ops = list(group.ops)
    first = next(i for i, o in enumerate(ops) if graph.op(o).op_type in REDUCTIONS)
    if not any(graph.op(o).op_type in PRODUCTS for o in ops[:first]):
        raise Unsupported("a reduction before the matmul (in its prologue)")
    if any(graph.op(o).op_type in PRODUCTS for o in ops[first:]):
        raise Unsupported("a matmul after a reduction of the same group")
    return make_group(graph, ops[:first]), make_group(graph, ops[first:])


def _row_env(first: Product) -> dict[str, np.ndarray]:
    """Sample points of the reduction's row ``r`` (the product's row ``b * M + m``) and
    column ``c`` (the product's ``n``): the reduction reads a hand-off back only there."""
    r, c = sample(first.nb * first.M)[:, None], sample(first.N)[None, :]
    return {"r": r, "c": c, "b": r // first.M, "m": r % first.M, "n": c}


def matmul_rows_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> KernelSource:
    """The kernel of a matmul group whose epilogue reduces the product's rows.

    Raises:
        Unsupported: a reduction before the matmul, or over other than the product's rows (a
            global pooling of a convolution's pixels); a hand-off not of the product's size;
            what the matmul or the reduction template refuses.
    """
    check_outputs(graph, group.outputs)
    head, tail = split_at_reduction(graph, group)
    ph = Phases(name, graph, group, head, tail, precision, "a row reduction")
    first = ph.prods[0]
    for t in head.outputs:
        if numel(ph.io.shape(t)) != first.nb * first.M * first.N:
            raise Unsupported(f"'{t}' is handed to the reduction but not of the product's size")
    rows = reduction_rows(graph, tail, ph.tail_io)
    if (rows.R, rows.C) != (first.nb * first.M, first.N):
        raise Unsupported("a reduction across the product's rows")
    env, why = _row_env(first), "the reduction reads the product off the rows it owns"
    rows.inputs = {t: ph.read_back(t, env, why) for t in head.outputs}
    tm, tn, tk = cube_tiles(config, ph.prods)
    tiles_m = math.ceil(first.M / tm)
    body = Body(1)
    row = body.child()
    row.line(f"b = tile // {tiles_m}")
    row.line(f"tm = tile % {tiles_m}")
    inner = row.child()
    tile_lanes(first, inner)
    tile_body(ph.prods, ph.head_io, ph.stored, inner)
    row.nest(f"for tn in range(0, {math.ceil(first.N / tn)}):", inner)
    row.line("tl.debug_barrier()  # the block's rows are stored: any lane may read them back")
    # the vector side holds half the plan's cube tile a pass, as the cost model sizes it
    tile_c = max(1, min((config.base_n or tn) // 2, first.N))
    rows_body(
        rows,
        ph.written,
        tile_c,
        row,
        f"b * {first.M} + tm * TILE_R",
        f"tm * TILE_R + lane_r < {first.M}",
    )
    tiles = first.nb * tiles_m
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    consts = [*cube_constexprs(tm, tn, tk), *row_constexprs(tm, block_of(tm), tile_c)]
    return ph.finish(name, graph, group, config, body, tiles, consts, "matmul_rows")
