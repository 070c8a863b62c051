"""Cube kernels: MatMul, Gemm, batched matmul and convolution (implicit GEMM), alone or side
by side over one input (horizontal fusion), with their prologue and epilogue chains.

Each program takes output tiles ``pid, pid + NPROG, ...`` of ``TILE_M x TILE_N`` elements (the
plan's L1 block, ``base_m x base_n``), over every batch; a tile accumulates ``TILE_K``-deep
slices of its operands (``base_k``) in float32 with ``tl.dot``, one accumulator per product,
one K loop for the products of one depth (so products of a shared input read it once). An
operand is read through the ops that make it inside the group (a transpose, a cast, a rotary
embedding, a convolution's window), and every output is computed from the accumulators by the
epilogue's ops (bias, batch norm, activation, residual, cast, a gate multiplying two products)
at the tile's own elements. An epilogue that reads a product half a head away (a rotary
embedding) takes paired tiles (``templates.rotary``); one that reads it anywhere else off its
tile is refused.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, numel, offset, substitute
from autotune.codegen.pull import Anchor, KernelIO, Lanes, Pull, lanes
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    block_of,
    check_outputs,
    finish,
    kernel_io,
    store,
)
from autotune.codegen.templates.placement import Placed, guarded, placed, placed_value
from autotune.codegen.templates.pointwise import side_outputs
from autotune.codegen.templates.products import PRODUCTS, Product, product
from autotune.codegen.templates.rotary import Pair, pair_of
from search_space.ir import FusionGroup, Graph, KernelConfig

__all__ = ["PRODUCTS", "matmul_kernel"]


def _cube_lanes(block_n: str) -> Lanes:
    return lanes(
        {"M": (0, "BLOCK_M"), "N": (1, block_n), "KA": (1, "BLOCK_K"), "KB": (0, "BLOCK_K")},
        m="M",
        n="N",
        mmask="M",
        nmask="N",
        mask="MN",
        ka="KA",
        kb="KB",
        amask="MKA",
        bmask="KBN",
    )


LANES = _cube_lanes("BLOCK_N")
# a paired tile's (``templates.rotary``): each half ``BLOCK_H`` columns wide
PAIRED = _cube_lanes("BLOCK_H").naming(j="N", n_lo="N", n_hi="N")


def _operand(value: str, dtype: str) -> str:
    """An operand tile in the format the product takes it in (``KernelIO.dot_dtype``)."""
    return value if dtype == "float32" else f"{value}.to(tl.{dtype})"


def _k_loop(prods: list[Product], io: KernelIO, row: Body, pair: Pair | None) -> None:
    """One K loop accumulating every product in ``prods`` (all of one depth); in a paired
    tile, two accumulators per product (its columns ``n_lo`` and ``n_hi``)."""
    halves = [("_lo", "n_lo"), ("_hi", "n_hi")] if pair else [("", "")]
    for p in prods:
        for suffix, _ in halves:
            width = "BLOCK_H" if pair else "BLOCK_N"
            row.line(f"{p.acc}{suffix} = tl.zeros([BLOCK_M, {width}], dtype=tl.float32)")
    inner = row.child()
    k = prods[0].K
    inner.line("ka = k0 + lane_k[None, :]")
    inner.line("kb = k0 + lane_k[:, None]")
    inner.line(f"amask = mmask & (lane_k[None, :] < TILE_K) & (ka < {k})")
    inner.line(f"bmask = nmask & (lane_k[:, None] < TILE_K) & (kb < {k})")
    pull = Pull(io, inner, PAIRED if pair else LANES)
    for p in prods:
        dtype = io.dot_dtype(p.a, p.b)
        guard = p.a_guard()
        amask = pull.bind(" & ".join(["amask", *guard]), "amask") if guard else "amask"
        a = pull.tile(p.a, p.a_index(), amask)
        if guard:
            a = pull.bind(f"tl.where({amask}, {a}, 0.0)")
        a = _operand(a, dtype)
        precision = ', input_precision="ieee"' if dtype == "float32" else ""
        for suffix, cols in halves:
            at = substitute(p.b_index(), "n", cols) if cols else p.b_index()
            b = _operand(pull.tile(p.b, at, "bmask"), dtype)
            acc = p.acc + suffix
            inner.line(f"{acc} = tl.dot({a}, {b}, {acc}{precision})")
    row.nest(f"for k0 in range(0, {k}, TILE_K):", inner)


def tile_vars(
    prod: Product, row: Body, tiles_m: int, tiles_n: int, pair: Pair | None = None
) -> None:
    """Output tile ``tile``'s batch ``b``, row tile ``tm``, column tile ``tn`` and lanes."""
    row.line(f"b = tile // {tiles_m * tiles_n}")
    row.line(f"tm = (tile // {tiles_n}) % {tiles_m}")
    row.line(f"tn = tile % {tiles_n}")
    tile_lanes(prod, row, pair)


def tile_lanes(prod: Product, row: Body, pair: Pair | None = None) -> None:
    """The lanes and masks of output tile (``b``, ``tm``, ``tn``); of a paired tile, its two
    halves' columns (``Pair.lanes``)."""
    row.line("lane_m = tl.arange(0, BLOCK_M)")
    row.line(f"lane_n = tl.arange(0, {'BLOCK_H' if pair else 'BLOCK_N'})")
    row.line("lane_k = tl.arange(0, BLOCK_K)")
    row.line("m = tm * TILE_M + lane_m[:, None]")
    if pair:
        pair.lanes(row)
    else:
        row.line("n = tn * TILE_N + lane_n[None, :]")
    row.line(f"mmask = (lane_m[:, None] < TILE_M) & (m < {prod.M})")
    if not pair:
        row.line(f"nmask = (lane_n[None, :] < TILE_N) & (n < {prod.N})")
    row.line("mask = mmask & nmask")


def cube_tiles(config: KernelConfig, prods: list[Product], parts: int = 0) -> tuple[int, int, int]:
    """The plan's L1 block (its L0 tile where no block is set), never over the product. The
    cost model sizes products side by side as one wider matmul (their outputs concatenated),
    so each of ``parts`` products (default: all, of one width) takes its share of the block's
    columns. Triton's blocks are powers of two: a tile whose block would pass the plan's
    (a spread of 272 columns in a block of 512) is cut to the power of two below it."""
    first = prods[0]
    base_m = config.base_m or config.m or 16
    base_n = (config.base_n or config.n or 16) // (parts or len(prods))
    base_k = config.base_k or config.k or 16
    return (
        _fit(min(base_m, first.M), base_m),
        _fit(min(base_n, max(p.N for p in prods)), base_n),
        _fit(min(base_k, max(p.K for p in prods)), base_k),
    )


def _fit(tile: int, base: int) -> int:
    tile = max(1, tile)
    return tile if block_of(tile) <= max(base, 16) else 1 << (max(1, base).bit_length() - 1)


def cube_constexprs(tm: int, tn: int, tk: int, pair: Pair | None = None) -> list[tuple[str, int]]:
    """``TILE_*`` (the tiles) and ``BLOCK_*`` (their lanes) of M, N and K; of a paired tile,
    also of each half (``H``)."""
    axes = [("M", tm), ("N", tn), ("K", tk), *([("H", pair.tile)] if pair else [])]
    return [
        (f"{kind}_{axis}", tile if kind == "TILE" else block_of(tile))
        for axis, tile in axes
        for kind in ("TILE", "BLOCK")
    ]


def products_of(graph: Graph, group: FusionGroup, io: KernelIO) -> list[Product]:
    """The group's products, one accumulator each (of one tile shape or not: see
    :func:`one_tile_shape`).

    Raises:
        Unsupported: a convolution beside a matmul, or a product no template computes.
    """
    prods = [product(graph.op(o), io) for o in group.ops if graph.op(o).op_type in PRODUCTS]
    first = prods[0]
    for i, p in enumerate(prods):
        p.acc = f"acc{i}" if len(prods) > 1 else "acc"
        if type(p) is not type(first):
            raise Unsupported("a convolution beside a matmul")
    return prods


def one_tile_shape(prods: list[Product]) -> bool:
    first = prods[0]
    return all((p.batch, p.M, p.N) == (first.batch, first.M, first.N) for p in prods)


def tile_body(
    prods: list[Product],
    io: KernelIO,
    outs: list[tuple[int, str]],
    row: Body,
    *,
    holes: bool = False,
    pair: Pair | None = None,
) -> None:
    """One output tile: a K loop per depth, then ``outs`` (position, tensor) stored; with
    ``holes``, an output the tile fills in part is stored at the tile's elements (the caller
    writes its holes); a paired tile stores them once per half."""
    for depth in sorted({p.K for p in prods}):
        _k_loop([p for p in prods if p.K == depth], io, row, pair)
    if pair is None:
        _epilogue(prods, io, outs, row, holes)
        return
    for start, env in pair.passes(prods):
        half = Body(row.indent, row, counter=row.counter)  # names bound apart: n differs
        half.line(start)
        _epilogue(prods, io, outs, half, holes, PAIRED, env)
        row.lines += half.lines


def placement(prods: list[Product], io: KernelIO, t: str, *, holes: bool = False) -> Placed | None:
    """Where output ``t`` holds a tile's element of one of the products, if it does (with
    ``holes``, also where it holds other elements: a concat of the tile and other tensors)."""
    for p in prods:
        where = placed(io, t, p.out, p.out_index(io.shape(p.out)), holes=holes)
        if where is not None:
            return where
    return None


def find_pair(
    prods: list[Product],
    io: KernelIO,
    outs: list[tuple[int, str]],
    tile_n: int,
    *,
    holes: bool = False,
) -> Pair | None:
    """The pairing of columns under which the epilogue (``tile_body``'s, with ``holes`` as
    there) reads the products on their tiles (``templates.rotary``), when it reads them off
    ordinary ones."""
    reads: list[tuple[Product, Index]] = []

    def recorder(p: Product) -> Anchor:
        def read(pull: Pull, idx: Index, mask: str) -> str:
            reads.append((p, idx))
            return p.acc

        return read

    anchors = {p.out: recorder(p) for p in prods}
    try:
        _epilogue(prods, io, outs, Body(0), holes, anchors=anchors)
    except Unsupported:
        return None
    return pair_of(prods, io, reads, tile_n)


def _epilogue(
    prods: list[Product],
    io: KernelIO,
    outs: list[tuple[int, str]],
    row: Body,
    holes: bool,
    lanes: Lanes = LANES,
    env: dict[str, np.ndarray] | None = None,
    anchors: dict[str, Anchor] | None = None,
) -> None:
    pull = Pull(io, row, lanes, anchors or {p.out: p.result for p in prods}, env)
    for pos, t in outs:
        where = placement(prods, io, t, holes=holes) or Placed(prods[0].out_index(io.shape(t)))
        mask = guarded(pull, "mask", where.guards)
        for p in prods:  # the output holds the tile's elements under its guards only
            p.guards = where.guards
        try:
            value = placed_value(pull, where, t, mask)
        finally:
            for p in prods:
                p.guards = ()
        ptr = pull.pointer(f"out{pos}", offset(where.index, io.shape(t)), mask)
        row.line(store(ptr, io.storage(t), io.fit(t, value), mask))


def matmul_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> KernelSource:
    """The kernel of a group around one or more MatMul, Gemm or Conv ops of one tile shape,
    its products' operands in the format ``precision`` (the plan's mode) gives them.

    Raises:
        Unsupported: a matmul of a vector, products of different tile shapes, an output not
            of the product's size, an epilogue that reads a product off its tile, or an op no
            template computes.
    """
    check_outputs(graph, group.outputs)
    io = kernel_io(graph, group, precision)
    prods = products_of(graph, group, io)
    if not one_tile_shape(prods):
        raise Unsupported("products of different tile shapes in one kernel")
    first = prods[0]
    tm, tn, tk = cube_tiles(config, prods)
    size = first.nb * first.M * first.N
    placed_at = {t: placement(prods, io, t, holes=True) for t in group.outputs}
    on_tile = [
        (p, t) for p, t in enumerate(group.outputs) if numel(io.shape(t)) == size or placed_at[t]
    ]

    def tiled(pair: Pair | None) -> tuple[Body, int]:
        tiles_m = math.ceil(first.M / tm)
        tiles_n = pair.tiles(first.N) if pair else math.ceil(first.N / tn)
        body = Body(1)
        row = body.child()
        tile_vars(first, row, tiles_m, tiles_n, pair)
        tile_body(prods, io, on_tile, row, holes=True, pair=pair)
        body.nest(f"for tile in range(pid, {first.nb * tiles_m * tiles_n}, NPROG):", row)
        return body, first.nb * tiles_m * tiles_n

    pair = None
    try:
        body, tiles = tiled(None)
    except Unsupported:  # off the tile: paired tiles, where a rotation explains the reads
        pair = find_pair(prods, io, on_tile, tn, holes=True)
        if pair is None:
            raise
        body, tiles = tiled(pair)
    pieces = {t: w.piece for t, w in placed_at.items() if w is not None and w.piece}
    side = side_outputs(io, group, size, body, skip={t for _, t in on_tile}, pieces=pieces)
    return finish(
        name,
        graph,
        group,
        config,
        io,
        body,
        tiles,
        [*cube_constexprs(tm, tn, tk, pair), *side],
        "matmul",
        dot_dtype=dot_dtype(io, prods),
    )


def dot_dtype(io: KernelIO, prods: list[Product]) -> str:
    """The narrowest operand format of the products (``KernelIO.dot_dtype``)."""
    return io.dot_dtype(*(t for p in prods for t in (p.a, p.b)))
