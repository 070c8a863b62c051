"""Products of different widths side by side: the projections of one input to Q, K and V of
grouped-query attention (K and V narrower than Q), in one kernel.

The cost model sizes such siblings as one matmul over their concatenated columns. So does the
kernel: its column tiles run over the products one after another, ``TILE_N = base_n`` columns
each, a tile in one product's span (a product's last tile is masked at its own width rather
than straddling into the next). A tile runs its product's K loop and the epilogue of the
outputs made from that product alone (in paired tiles where its epilogue rotates it, as
``templates.rotary`` says); an output made from two of them (a gate multiplying
two products of one width is the ``matmul`` template's) is refused.
"""

from __future__ import annotations

import math

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import numel
from autotune.codegen.kernel_io import KernelIO
from autotune.codegen.source import Body
from autotune.codegen.templates.common import KernelSource, check_outputs, finish, kernel_io
from autotune.codegen.templates.matmul import (
    cube_constexprs,
    cube_tiles,
    dot_dtype,
    find_pair,
    placement,
    products_of,
    tile_body,
    tile_lanes,
)
from autotune.codegen.templates.products import Product
from autotune.codegen.templates.rotary import Pair
from search_space.ir import FusionGroup, Graph, KernelConfig

__all__ = ["segments_kernel"]


def _owners(
    graph: Graph, group: FusionGroup, prods: list[Product], io: KernelIO
) -> dict[str, int]:
    """Each output of the group -> the one product it is made from (of its size, or a piece
    of it stored from the tile: a slice of K that Llama's rotary embedding reads)."""
    made_by = {p.out: i for i, p in enumerate(prods)}
    ops = set(group.ops)

    def sources(t: str) -> set[int]:
        if t in made_by:
            return {made_by[t]}
        op = graph.producer(t)
        if op is None or op.name not in ops:
            return set()
        return set().union(*(sources(x) for x in op.inputs if x))

    owners = {}
    for t in group.outputs:
        found = sources(t)
        if len(found) != 1:
            raise Unsupported(
                f"output '{t}' is made from {len(found)} products of different widths"
            )
        owners[t] = found.pop()
        p = prods[owners[t]]
        whole = numel(graph.tensors[t].static_shape) == p.nb * p.M * p.N
        if not whole and placement([p], io, t) is None:
            raise Unsupported(f"output '{t}' is not of its product's size")
    return owners


def _branch(
    p: Product, io: KernelIO, outs: list[tuple[int, str]], row: Body, start: int, tn: int
) -> tuple[Body, Pair | None]:
    """Product ``p``'s tiles (from column tile ``start`` of the kernel's): ordinary ones, or
    paired where its epilogue rotates it (``find_pair``, tried only when they fail)."""

    def built(pair: Pair | None) -> Body:
        branch = row.child()
        branch.line(f"tn = tc - {start}")
        tile_lanes(p, branch, pair)
        tile_body([p], io, outs, branch, pair=pair)
        return branch

    try:
        return built(None), None
    except Unsupported:
        pair = find_pair([p], io, outs, tn)
        if pair is None:
            raise
        return built(pair), pair


def segments_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> KernelSource:
    """The kernel of products of one batch and rows but different widths (module docstring).

    Raises:
        Unsupported: products of different batches or rows; an output made from several
            products, or not of its product's size.
    """
    check_outputs(graph, group.outputs)
    io = kernel_io(graph, group, precision)
    prods = products_of(graph, group, io)
    first = prods[0]
    if any((p.batch, p.M) != (first.batch, first.M) for p in prods):
        raise Unsupported("products of different batches or rows in one kernel")
    owners = _owners(graph, group, prods, io)
    tm, tn, tk = cube_tiles(config, prods, parts=1)  # a tile in one product's span
    outs = [
        [(pos, t) for pos, t in enumerate(group.outputs) if owners[t] == i]
        for i in range(len(prods))
    ]
    body = Body(1)
    row = body.child()
    branches: list[Body] = []
    pairs: list[Pair | None] = []
    spans: list[int] = []
    for p, o in zip(prods, outs, strict=True):
        p.acc = "acc"
        branch, pair = _branch(p, io, o, row, sum(spans), tn)
        branches.append(branch)
        pairs.append(pair)
        spans.append(pair.tiles(p.N) if pair else math.ceil(p.N / tn))
    if len({q.tile for q in pairs if q}) > 1:
        raise Unsupported("rotary embeddings of different head sizes in one kernel")
    tiles_m = math.ceil(first.M / tm)
    row.line(f"b = tile // {tiles_m * sum(spans)}")
    row.line(f"tm = (tile // {sum(spans)}) % {tiles_m}")
    row.line(f"tc = tile % {sum(spans)}")
    for i, branch in enumerate(branches):
        row.nest(f"{'if' if i == 0 else 'elif'} tc < {sum(spans[: i + 1])}:", branch)
    tiles = first.nb * tiles_m * sum(spans)
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    paired = next((q for q in pairs if q), None)
    return finish(
        name,
        graph,
        group,
        config,
        io,
        body,
        tiles,
        cube_constexprs(tm, tn, tk, paired),
        "matmul",
        dot_dtype=dot_dtype(io, prods),
    )
