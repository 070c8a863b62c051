"""A matmul whose epilogue spreads the product over a larger tensor: a squeeze-excitation gate
(a 1x1 convolution of the pooled channels, its activation, and the multiply that scales every
pixel of the feature map by its channel's gate), or a per-sample vector added to every row.

The output has the product's dims but some of them, where the product has one element, are
wider: each product element is read by every element along those dims (the broadcast dims,
``E`` elements per product element). Each program takes tiles of the product as the matmul
template does: the K loop and the epilogue ops of the product's own size, whose values the
spreading ops read are stored (to scratch unless the group outputs them); then, after a
barrier, for each of the tile's rows, the spreading ops over ``TILE_E`` broadcast elements at
a time by the tile's ``TILE_N`` columns, reading the stored values back only at the tile's own
elements.
"""

from __future__ import annotations

import math
import re

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, numel, offset, same_index, sample, unflatten
from autotune.codegen.kernel_io import KernelIO
from autotune.codegen.pull import Anchor, Pull, lanes
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    Scratch,
    check_outputs,
    finish,
    kernel_io,
    next_pow2,
    store,
)
from autotune.codegen.templates.matmul import (
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
from autotune.codegen.templates.products import PRODUCTS, Product
from search_space.ir import FusionGroup, Graph, KernelConfig, make_group

__all__ = ["broadcast_shape", "matmul_broadcast_kernel"]

# the spreading phase: broadcast elements e down, the tile's columns n across; its row is a
# scalar (``row``), the tile's ``m`` of the matmul phase being a column of lanes
LANES = lanes({"E": (0, "BLOCK_E"), "N": (1, "BLOCK_N")}, e="E", n="N", nmask="N", emask="EN")


def broadcast_shape(graph: Graph, group: FusionGroup) -> tuple[int, ...] | None:
    """The shape the group's products are spread over (its outputs larger than the product),
    or None: when there is none, or they differ, or one is not the product's shape widened
    along dims where the product has one element."""
    cube = [graph.op(o) for o in group.ops if graph.op(o).op_type in PRODUCTS]
    if not cube:
        return None
    own = graph.tensors[cube[0].outputs[0]].static_shape
    wide = {graph.tensors[t].static_shape for t in group.outputs}
    wide = {s for s in wide if numel(s) > numel(own)}
    if len(wide) != 1:
        return None
    (big,) = wide
    if len(big) != len(own) or any(o not in (b, 1) for o, b in zip(own, big, strict=True)):
        return None
    return big


def _split(graph: Graph, group: FusionGroup, size: int) -> tuple[FusionGroup, FusionGroup]:
    """The ops whose outputs are of the product's size (the matmul phase) and the rest (the
    spreading phase), each only reading the first phase or its own."""
    ops = [graph.op(o) for o in group.ops]
    head = [op.name for op in ops if all(numel(graph.tensors[t].static_shape) == size
                                         for t in op.outputs if t)]  # fmt: skip
    tail = [op.name for op in ops if op.name not in head]
    made_late = {t for o in tail for t in graph.op(o).outputs}
    if any(t in made_late for o in head for t in graph.op(o).inputs):
        raise Unsupported("an op of the product's size after a broadcast of it")
    return make_group(graph, head), make_group(graph, tail)


class _Spread:
    """Product element (b, m, n) spread over the broadcast dims: the wide output's index
    for the phase's lanes, with the tile's row ``row`` a scalar."""

    def __init__(self, first: Product, own: tuple[int, ...], big: tuple[int, ...]):
        self.first, self.own, self.big = first, own, big
        self.dims = [d for d, (o, b) in enumerate(zip(own, big, strict=True)) if o != b]
        self.E = math.prod(big[d] for d in self.dims)

    def index(self, m: str) -> Index:
        """The wide output's element for broadcast element ``e`` of product element
        (b, ``m``, n)."""
        canonical = [re.sub(r"\bm\b", m, i) for i in self.first.out_index(self.own)]
        spread = iter(unflatten("e", [self.big[d] for d in self.dims]))
        return tuple(
            next(spread) if d in self.dims else canonical[d] for d in range(len(self.big))
        )


def _read_back(spread: _Spread, prods: list[Product], io: KernelIO, tensor: str) -> Anchor:
    """How the spreading phase reads a stored value of the product's size: only where the
    matmul phase stored the tile's element at row ``row`` (its index carried through the
    ops that made it: a transpose stores elsewhere), else the group runs as two kernels."""
    where = placement(prods, io, tensor) or Placed(spread.first.out_index(io.shape(tensor)))
    stored = None if where.guards else tuple(re.sub(r"\bm\b", "row", i) for i in where.index)
    first = spread.first
    env = {"b": sample(first.nb)[:, None, None, None], "row": sample(first.M)[:, None, None],
           "n": sample(first.N)[:, None], "e": sample(spread.E)}  # fmt: skip

    def resolve(pull: Pull, idx: Index, mask: str) -> str:
        if stored is None or not same_index(idx, stored, env):
            raise Unsupported("the broadcast reads the product off its tile")
        return pull.load(tensor, idx, mask)

    return resolve


def _spread_phase(
    spread: _Spread,
    io: KernelIO,
    head_io: KernelIO,
    prods: list[Product],
    stored: list[str],
    outs: list[tuple[int, str]],
    tile_e: int,
    row: Body,
) -> None:
    """After the tile's values (``stored``, made by ``head_io``'s ops) are stored: per row
    of the tile, the wide outputs over the broadcast elements, ``TILE_E`` at a time."""
    first = spread.first
    per_row = row.child()
    per_row.line("row = tm * TILE_M + mi")
    inside = per_row.child()  # a row past the product's last: nothing to spread
    chunk = inside.child()
    chunk.line("lane_e = tl.arange(0, BLOCK_E)[:, None]")
    chunk.line("e = e0 + lane_e")
    chunk.line(f"emask = (lane_e < TILE_E) & (e < {spread.E}) & nmask")
    pull = Pull(io, chunk, LANES, {t: _read_back(spread, prods, head_io, t) for t in stored})
    for pos, t in outs:
        idx = spread.index("row")
        value = pull.value(t, idx, "emask")
        chunk.line(store(pull.pointer(f"out{pos}", offset(idx, io.shape(t)), "emask"),
                         io.dtype(t), value, "emask"))  # fmt: skip
    inside.nest(f"for e0 in range(0, {spread.E}, TILE_E):", chunk)
    per_row.nest(f"if row < {first.M}:", inside)
    row.nest("for mi in range(0, TILE_M):", per_row)


def matmul_broadcast_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> KernelSource:
    """The kernel of a matmul group whose outputs spread the product over broadcast dims.

    Raises:
        Unsupported: outputs that are not one broadcast of the product, an op of the
            product's size after the broadcast, a read of the product off its tile, or what
            the matmul template refuses.
    """
    check_outputs(graph, group.outputs)
    big = broadcast_shape(graph, group)
    if big is None:
        raise Unsupported("outputs that are not one broadcast of the product")
    io = kernel_io(graph, group, precision)
    cube = next(graph.op(o) for o in group.ops if graph.op(o).op_type in PRODUCTS)
    own = io.shape(cube.outputs[0])
    head, tail = _split(graph, group, numel(own))
    head_io = KernelIO(graph, frozenset(head.ops), io.params, io.literals, precision)
    prods = products_of(graph, head, head_io)
    if not one_tile_shape(prods):
        raise Unsupported("products of different tile shapes before a broadcast")
    first = prods[0]
    handoff = [t for t in head.outputs if t not in group.outputs]
    scratch = tuple(Scratch(f"{name}::{t}", io.shape(t), io.dtype(t)) for t in handoff)
    pos = {t: i for i, t in enumerate([*group.outputs, *handoff])}
    wide = [(pos[t], t) for t in tail.outputs]
    if any(io.shape(t) != big for _, t in wide):
        raise Unsupported("an output of the broadcast's ops that is not the broadcast's shape")
    spread = _Spread(first, own, big)
    read_back = {**io.params, **{t: f"out{pos[t]}" for t in head.outputs}}
    tail_io = KernelIO(graph, frozenset(tail.ops), read_back, io.literals, precision)
    tm, tn, tk = cube_tiles(config, prods)
    tiles_m, tiles_n = math.ceil(first.M / tm), math.ceil(first.N / tn)
    # the spreading block holds as many elements as the plan's output block (base_m x base_n)
    tile_e = max(1, min(spread.E, (config.base_m or tm) * (config.base_n or tn) // tn))
    body = Body(1)
    row = body.child()
    row.line(f"b = tile // {tiles_m * tiles_n}")
    row.line(f"tm = (tile // {tiles_n}) % {tiles_m}")
    row.line(f"tn = tile % {tiles_n}")
    tile_lanes(first, row)
    tile_body(prods, head_io, [(pos[t], t) for t in head.outputs], row)
    row.line("tl.debug_barrier()  # the tile's values are stored: any lane may read them back")
    _spread_phase(spread, tail_io, head_io, prods, list(head.outputs), wide, tile_e, row)
    tiles = first.nb * tiles_m * tiles_n
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    consts = [*cube_constexprs(tm, tn, tk), ("TILE_E", tile_e), ("BLOCK_E", next_pow2(tile_e))]
    return finish(name, graph, group, config, io, body, tiles, consts, "matmul_broadcast",
                  outputs=[*group.outputs, *(s.name for s in scratch)], scratch=scratch,
                  dot_dtype=dot_dtype(head_io, prods))  # fmt: skip
