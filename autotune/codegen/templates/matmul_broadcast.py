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

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, numel, offset, sample, substitute, unflatten
from autotune.codegen.pull import Pull, lanes
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    check_outputs,
    next_pow2,
    store,
)
from autotune.codegen.templates.matmul import (
    cube_constexprs,
    cube_tiles,
    tile_body,
    tile_vars,
)
from autotune.codegen.templates.phases import Phases
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
    head = [
        op.name
        for op in ops
        if all(numel(graph.tensors[t].static_shape) == size for t in op.outputs if t)
    ]
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
        canonical = substitute(self.first.out_index(self.own), "m", m)
        spread = iter(unflatten("e", [self.big[d] for d in self.dims]))
        return tuple(
            next(spread) if d in self.dims else canonical[d] for d in range(len(self.big))
        )


def _spread_phase(ph: Phases, spread: _Spread, tile_e: int, row: Body) -> None:
    """After the tile's values are stored: per row of the tile, the wide outputs over the
    broadcast elements, ``TILE_E`` at a time, reading the stored values back only where the
    tile's row ``row`` stored them."""
    first = spread.first
    env = {
        "b": sample(first.nb)[:, None, None, None],
        "row": sample(first.M)[:, None, None],
        "n": sample(first.N)[:, None],
        "e": sample(spread.E),
    }
    why = "the broadcast reads the product off its tile"
    back = {t: ph.read_back(t, env, why, ("m", "row")) for t in ph.head.outputs}
    per_row = row.child()
    per_row.line("row = tm * TILE_M + mi")
    inside = per_row.child()  # a row past the product's last: nothing to spread
    chunk = inside.child()
    chunk.line("lane_e = tl.arange(0, BLOCK_E)[:, None]")
    chunk.line("e = e0 + lane_e")
    chunk.line(f"emask = (lane_e < TILE_E) & (e < {spread.E}) & nmask")
    pull = Pull(ph.tail_io, chunk, LANES, back)
    idx = spread.index("row")
    for pos, t in ph.written:
        value = pull.value(t, idx, "emask")
        chunk.line(
            store(
                pull.pointer(f"out{pos}", offset(idx, ph.io.shape(t)), "emask"),
                ph.io.storage(t),
                ph.io.fit(t, value),
                "emask",
            )
        )
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
    cube = next(graph.op(o) for o in group.ops if graph.op(o).op_type in PRODUCTS)
    own = graph.tensors[cube.outputs[0]].static_shape
    head, tail = _split(graph, group, numel(own))
    ph = Phases(name, graph, group, head, tail, precision, "a broadcast")
    if any(ph.io.shape(t) != big for t in tail.outputs):
        raise Unsupported("an output of the broadcast's ops that is not the broadcast's shape")
    first = ph.prods[0]
    spread = _Spread(first, own, big)
    tm, tn, tk = cube_tiles(config, ph.prods)
    tiles_m, tiles_n = math.ceil(first.M / tm), math.ceil(first.N / tn)
    # the spreading block holds as many elements as the plan's output block (base_m x base_n)
    tile_e = max(1, min(spread.E, (config.base_m or tm) * (config.base_n or tn) // tn))
    body = Body(1)
    row = body.child()
    tile_vars(first, row, tiles_m, tiles_n)
    tile_body(ph.prods, ph.head_io, ph.stored, row)
    row.line("tl.debug_barrier()  # the tile's values are stored: any lane may read them back")
    _spread_phase(ph, spread, tile_e, row)
    tiles = first.nb * tiles_m * tiles_n
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    consts = [*cube_constexprs(tm, tn, tk), ("TILE_E", tile_e), ("BLOCK_E", next_pow2(tile_e))]
    return ph.finish(name, graph, group, config, body, tiles, consts, "matmul_broadcast")
