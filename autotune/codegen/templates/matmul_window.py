"""A convolution and the window after it (ResNet's stem: conv, batch norm, ReLU and a 3x3 max
pool of stride 2), as one kernel of overlapping bands.

A window reads its input at neighbouring rows, so an output row of the pool needs conv rows
that another program's tiles would compute, and no barrier spans programs. Each program owns
bands of ``BAND`` output rows of one image instead: it runs the convolution (the K loop, then
the epilogue ops up to the window) over every conv row the band's windows read, the halo rows
at its edges included, and stores them (into scratch unless the group outputs them); after a
barrier it runs the window and what follows it over the band, reading back only rows it
stored. Neighbouring bands both compute the halo rows they share and store them twice, a
race that is harmless because the values are bitwise the same (the same code on the same
inputs in the same order): ``kernel - stride`` conv rows per band, which one band per
program, where the cores allow, keeps to the fewest.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, evaluate, offset, same_index, sample
from autotune.codegen.pull import Anchor, Pull, lanes
from autotune.codegen.source import Body, paren
from autotune.codegen.templates.common import KernelSource, check_outputs, next_pow2, store
from autotune.codegen.templates.matmul import (
    PRODUCTS,
    cube_constexprs,
    cube_tiles,
    placement,
    tile_body,
)
from autotune.codegen.templates.phases import Phases
from autotune.codegen.window import is_depthwise, window_pads
from search_space.ir import FusionGroup, Graph, KernelConfig, Op, make_group

__all__ = ["Band", "matmul_window_kernel", "split_at_window"]

# the second phase's lanes: one flat run over a band's outputs
LANES = lanes({"F": (0, "BLOCK_F")}, f="F", c="F", p="F", q="F", fmask="F")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def _is_window(graph: Graph, op: Op) -> bool:
    if op.op_type in ("MaxPool", "AveragePool"):
        return True
    return op.op_type == "Conv" and is_depthwise(op, graph.tensors[op.inputs[1]].static_shape)


def split_at_window(graph: Graph, group: FusionGroup) -> tuple[FusionGroup, FusionGroup] | None:
    """The group's ops before its first window that reads a product's epilogue (the
    convolution up to the window) and from the window on; None when no window does, or a
    product (other than a depthwise convolution, itself a window) follows it."""
    ops = [graph.op(o) for o in group.ops]
    made: set[str] = set()  # what the products and the ops after them make
    for i, op in enumerate(ops):
        window = _is_window(graph, op)
        if window and op.inputs[0] in made:
            tail = ops[i:]
            if any(o.op_type in PRODUCTS and not _is_window(graph, o) for o in tail):
                return None
            head = make_group(graph, [o.name for o in ops[:i]])
            return head, make_group(graph, [o.name for o in tail])
        if (op.op_type in PRODUCTS and not window) or made & set(op.inputs):
            made.update(o for o in op.outputs if o)
    return None


@dataclass(frozen=True)
class Band:
    """The window's geometry along its first spatial dim: ``rows`` output rows per band,
    read from conv rows ``[row * stride - pad, ... + (kernel - 1) * dilation]``, of an input
    ``height`` rows high. With ``cover`` (the group also outputs what the window reads) the
    bands compute every conv row between them and below the last, which no window may read
    (a 2x2 pool of 13 rows, a stride past the kernel), so that output is whole."""

    rows: int
    stride: int
    pad: int
    reach: int  # (kernel - 1) * dilation: the last tap's offset
    height: int
    out_rows: int
    cover: bool = False

    @property
    def bands(self) -> int:
        return math.ceil(self.out_rows / self.rows)

    def first(self, p0: np.ndarray) -> np.ndarray:
        """The first conv row the band starting at output row ``p0`` reads."""
        return np.maximum(p0 * self.stride - self.pad, 0)

    def end(self, p0: np.ndarray) -> np.ndarray:
        """One past the last conv row it computes: the last its windows read, or with
        ``cover`` up to the next band's first row, and the last band to the bottom."""
        last = np.minimum(
            (p0 + self.rows - 1) * self.stride - self.pad + self.reach + 1, self.height
        )
        if not self.cover:
            return last
        upto = np.minimum(self.first(p0 + self.rows), self.height)
        bottom = np.where(p0 + self.rows >= self.out_rows, self.height, 0)
        return np.maximum(np.maximum(last, upto), bottom)

    def end_lines(self) -> list[str]:
        """``end`` in Triton, of the band starting at output row ``p0`` (into ``r1``)."""
        last = (self.rows - 1) * self.stride - self.pad + self.reach + 1
        lines = [f"r1 = tl.minimum(p0 * {self.stride} + {last}, {self.height})"]
        if self.cover:
            nxt = f"tl.maximum((p0 + BAND) * {self.stride} - {self.pad}, 0)"
            last_band = f"(p0 + BAND >= {self.out_rows}).to(tl.int32)"
            lines += [
                f"r1 = tl.maximum(r1, tl.minimum({nxt}, {self.height}))",
                f"r1 = tl.maximum(r1, {last_band} * {self.height})",
            ]
        return lines


def _band(graph: Graph, window: Op, config: KernelConfig, images: int, cover: bool) -> Band:
    x, y = graph.tensors[window.inputs[0]].static_shape, graph.tensors[window.outputs[0]]
    out = y.static_shape
    if len(x) != 4:
        raise Unsupported(f"a {window.op_type} over {len(x) - 2} spatial dims after a matmul")
    kernel = list(window.attr("kernel_shape") or graph.tensors[window.inputs[1]].static_shape[2:])
    stride = (window.attr("strides") or [1, 1])[0]
    dil = (window.attr("dilations") or [1, 1])[0]
    pad = window_pads(window, x[2:], out[2:], kernel)[0][0]
    # one band per program where the cores allow: the fewest halo rows computed twice
    per_image = min(out[2], max(1, math.ceil(config.block_dim / images)))
    rows = math.ceil(out[2] / per_image)
    return Band(rows, stride, pad, (kernel[0] - 1) * dil, x[2], out[2], cover)


def _expand(body: Body, expr: str) -> str:
    """``expr`` with the names ``body`` bound replaced by what they hold, down to the
    variables the kernel sets by hand (for :func:`indexing.evaluate`)."""
    held: dict[str, str] = {}
    scope: Body | None = body
    while scope is not None:
        held.update({name: e for e, name in scope.names.items()})
        scope = scope.parent
    for _ in range(64):  # bindings nest, never cycle
        new = _NAME.sub(lambda w: paren(held[w.group()]) if w.group() in held else w.group(), expr)
        if new == expr:
            return expr
        expr = new
    return expr


def _band_reader(ph: Phases, tensor: str, band: Band, images: int, row: Body) -> Anchor:
    """The second phase's read of ``tensor`` (stored by the first): allowed where every read
    is this image's, in a conv row the band stored or in the padding (masked); any other read
    is another band's, refused."""
    starts = np.arange(band.bands)[:, None, None, None] * band.rows
    p = starts + np.arange(band.rows)[None, :, None, None]
    env = {"img": sample(images)[None, None, :, None], "p": p, "p0": starts}
    first, end = band.first(starts), band.end(starts)

    def resolve(pull: Pull, idx: Index, mask: str) -> str:
        try:
            img, h = (evaluate(_expand(row, e), env) for e in (idx[0], idx[2]))
        except (ValueError, SyntaxError):
            raise Unsupported("the window reads the convolution at an unknown row") from None
        own = (img == env["img"]) & ((h >= first) & (h < end) | (h < 0) | (h >= band.height))
        live = p < band.out_rows
        shape = np.broadcast_shapes(own.shape, live.shape)
        if not np.broadcast_to(own, shape)[np.broadcast_to(live, shape)].all():
            raise Unsupported("the window reads rows another band computes")
        return pull.load(tensor, idx, mask)

    return resolve


def matmul_window_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> KernelSource:
    """The kernel of a convolution group whose epilogue ends in a window (module docstring).

    Raises:
        Unsupported: no window reads the convolution, a window not over 2-D images, a
            convolution after it, tail outputs of different shapes, or what the matmul
            template refuses.
    """
    check_outputs(graph, group.outputs)
    cut = split_at_window(graph, group)
    if cut is None:
        raise Unsupported("no window reads the convolution")
    head, tail = cut
    ph = Phases(name, graph, group, head, tail, precision, "a window")
    first = ph.prods[0]
    window = graph.op(tail.ops[0])
    handoff = window.inputs[0]
    images, _, height, width = ph.io.shape(handoff)
    if first.nb != 1 or first.M != images * height * width:
        raise Unsupported("a grouped convolution before a window")
    for t in ph.head.outputs:  # the tail reads rows back as conv rows: stored as the conv's
        where = placement(ph.prods, ph.head_io, t)
        conv_order = first.out_index(ph.io.shape(handoff))
        if (
            ph.io.shape(t) != ph.io.shape(handoff)
            or where is None
            or where.guards
            or not (same_index(where.index, conv_order, first.env()))
        ):
            raise Unsupported(f"'{t}' is not stored in the convolution's own order")
    out_shape = ph.io.shape(window.outputs[0])
    if any(ph.io.shape(t) != out_shape for t in tail.outputs):
        raise Unsupported("outputs of the window's tail of different shapes")
    band = _band(graph, window, config, images, bool(set(head.outputs) & set(group.outputs)))
    tm, tn, tk = cube_tiles(config, ph.prods)
    body = Body(1)
    row = body.child()
    _conv_phase(ph, band, row, (height * width, width), math.ceil(first.N / tn))
    row.line("tl.debug_barrier()  # the band's conv rows are stored: any lane may read them")
    size = out_shape[1] * band.rows * out_shape[3]
    block = min(next_pow2(size), next_pow2(tm * tn) // 2 or 1)
    _window_phase(ph, band, images, row, out_shape, size)
    tiles = images * band.bands
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    consts = [*cube_constexprs(tm, tn, tk), ("BAND", band.rows), ("BLOCK_F", max(16, block))]
    return ph.finish(name, graph, group, config, body, tiles, consts, "matmul_window")


def _conv_phase(ph: Phases, band: Band, row: Body, image: tuple[int, int], tiles_n: int) -> None:
    """The band's image ``img`` and first output row ``p0``; the convolution over the conv
    rows its windows read (``image``: pixels per image and per row), stored."""
    first = ph.prods[0]
    pixels, width = image
    row.line(f"img = tile // {band.bands}")
    row.line(f"p0 = (tile % {band.bands}) * BAND")
    row.line(f"r0 = tl.maximum(p0 * {band.stride} - {band.pad}, 0)")
    for line in band.end_lines():
        row.line(line)
    row.line(f"m0 = img * {pixels} + r0 * {width}")
    row.line(f"m1 = img * {pixels} + r1 * {width}")
    row.line("b = 0")
    inner = row.child()
    inner.line(f"tm = t // {tiles_n}")
    inner.line(f"tn = t % {tiles_n}")
    inner.line("lane_m = tl.arange(0, BLOCK_M)")
    inner.line("lane_n = tl.arange(0, BLOCK_N)")
    inner.line("lane_k = tl.arange(0, BLOCK_K)")
    inner.line("m = m0 + tm * TILE_M + lane_m[:, None]")
    inner.line("n = tn * TILE_N + lane_n[None, :]")
    inner.line("mmask = (lane_m[:, None] < TILE_M) & (m < m1)")
    inner.line(f"nmask = (lane_n[None, :] < TILE_N) & (n < {first.N})")
    inner.line("mask = mmask & nmask")
    tile_body(ph.prods, ph.head_io, ph.stored, inner)
    row.nest(f"for t in range(0, tl.cdiv(m1 - m0, TILE_M) * {tiles_n}):", inner)


def _window_phase(
    ph: Phases, band: Band, images: int, row: Body, out_shape: tuple[int, ...], size: int
) -> None:
    """The window and its tail over the band's outputs, ``BLOCK_F`` at a time, reading the
    stored conv rows back (:func:`_band_reader`)."""
    out_w = out_shape[3]
    loop = row.child()
    loop.line("f = f0 + tl.arange(0, BLOCK_F)")
    loop.line(f"c = f // {band.rows * out_w}")
    loop.line(f"p = p0 + (f // {out_w}) % BAND")
    loop.line(f"q = f % {out_w}")
    loop.line(f"fmask = (f < {size}) & (p < {band.out_rows})")
    reads = {t: _band_reader(ph, t, band, images, loop) for t in ph.head.outputs}
    pull = Pull(ph.tail_io, loop, LANES, reads)
    at: Index = ("img", "c", "p", "q")
    for pos, t in ph.written:
        value = pull.value(t, at, "fmask")
        ptr = pull.pointer(f"out{pos}", offset(at, out_shape), "fmask")
        loop.line(store(ptr, ph.io.storage(t), ph.io.fit(t, value), "fmask"))
    row.nest(f"for f0 in range(0, {size}, BLOCK_F):", loop)
