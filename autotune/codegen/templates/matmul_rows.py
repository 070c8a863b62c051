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

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, numel, same_index, sample
from autotune.codegen.kernel_io import KernelIO
from autotune.codegen.pull import Anchor, Pull
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    Scratch,
    block_of,
    check_outputs,
    finish,
    kernel_io,
)
from autotune.codegen.templates.matmul import (
    PRODUCTS,
    cube_constexprs,
    cube_tiles,
    dot_dtype,
    one_tile_shape,
    placement,
    products_of,
    tile_body,
    tile_lanes,
)
from autotune.codegen.templates.placement import Placed
from autotune.codegen.templates.products import Product
from autotune.codegen.templates.reduction import (
    REDUCTIONS,
    reduction_rows,
    row_constexprs,
    rows_body,
)
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


def _read_back(prods: list[Product], io: KernelIO, tensor: str, rows_per_batch: int) -> Anchor:
    """How the reduction reads a hand-off back: only at the elements of the rows the program
    computed (its row ``r`` is the product's row ``b * M + m``, its column ``c`` the product's
    ``n``); any other element is another program's, and the group runs as two kernels."""
    where = placement(prods, io, tensor) or Placed(prods[0].out_index(io.shape(tensor)))
    r, c = sample(prods[0].nb * rows_per_batch)[:, None], sample(prods[0].N)[None, :]
    env = {"r": r, "c": c, "b": r // rows_per_batch, "m": r % rows_per_batch, "n": c}

    def resolve(pull: Pull, idx: Index, mask: str) -> str:
        if where.guards or not same_index(idx, where.index, env):
            raise Unsupported("the reduction reads the product off the rows it owns")
        return pull.load(tensor, idx, mask)

    return resolve


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
    io = kernel_io(graph, group, precision)
    head_io = KernelIO(graph, frozenset(head.ops), io.params, io.literals, precision)
    prods = products_of(graph, head, head_io)
    if not one_tile_shape(prods):
        raise Unsupported("products of different tile shapes before a row reduction")
    first = prods[0]
    handoff = [t for t in head.outputs if t not in group.outputs]
    scratch = tuple(Scratch(f"{name}::{t}", io.shape(t), io.dtype(t)) for t in handoff)
    outputs = [*group.outputs, *(s.name for s in scratch)]
    pos = {t: i for i, t in enumerate([*group.outputs, *handoff])}
    for t in head.outputs:
        if numel(io.shape(t)) != first.nb * first.M * first.N:
            raise Unsupported(f"'{t}' is handed to the reduction but not of the product's size")
    read_back = {**io.params, **{t: f"out{pos[t]}" for t in head.outputs}}
    tail_io = KernelIO(graph, frozenset(tail.ops), read_back, io.literals, precision)
    rows = reduction_rows(graph, tail, tail_io)
    if (rows.R, rows.C) != (first.nb * first.M, first.N):
        raise Unsupported("a reduction across the product's rows")
    rows.inputs = {t: _read_back(prods, head_io, t, first.M) for t in head.outputs}
    tm, tn, tk = cube_tiles(config, prods)
    tiles_m = math.ceil(first.M / tm)
    body = Body(1)
    row = body.child()
    row.line(f"b = tile // {tiles_m}")
    row.line(f"tm = tile % {tiles_m}")
    inner = row.child()
    tile_lanes(first, inner)
    tile_body(prods, head_io, [(pos[t], t) for t in head.outputs], inner)
    row.nest(f"for tn in range(0, {math.ceil(first.N / tn)}):", inner)
    row.line("tl.debug_barrier()  # the block's rows are stored: any lane may read them back")
    # the vector side holds half the plan's cube tile a pass, as the cost model sizes it
    tile_c = max(1, min((config.base_n or tn) // 2, first.N))
    rows_body(rows, [(pos[t], t) for t in tail.outputs], tile_c, row,
              f"b * {first.M} + tm * TILE_R", f"tm * TILE_R + lane_r < {first.M}")  # fmt: skip
    tiles = first.nb * tiles_m
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    consts = [*cube_constexprs(tm, tn, tk), *row_constexprs(tm, block_of(tm), tile_c)]
    dots = dot_dtype(head_io, prods)
    return finish(name, graph, group, config, io, body, tiles, consts, "matmul_rows",
                  outputs=outputs, scratch=scratch, dot_dtype=dots)  # fmt: skip
