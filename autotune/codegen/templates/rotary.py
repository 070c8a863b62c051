"""Paired tiles: a rotary embedding (RoPE) in a matmul's epilogue.

Llama's ``rotate_half`` reads a projection's column ``n + R`` beside column ``n`` in the first
half of each head and ``n - R`` in the second (``R`` half the head, the period ``P = 2R``):
off any tile of consecutive columns. A paired tile instead holds ``TILE_H`` columns of a
head's first half and the same columns of its second half, as two accumulators of one K loop
(a dot each, sharing the A tile: the cube work of one tile twice as wide, the plan's tile as
the cost model prices it). Its epilogue runs once per half, and a read of the other half's
column is the other accumulator. The pairing is found by reading the epilogue once: every
read of a product off its tile is one constant shift ``R`` away, and the product's width is a
multiple of ``2R``; the passes then prove each read against the exact columns of their half.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from autotune.codegen.indexing import Index, evaluate, offset, same_index
from autotune.codegen.kernel_io import KernelIO
from autotune.codegen.source import Body
from autotune.codegen.templates.products import MatMul, Product

__all__ = ["MIN_HALF", "Pair", "pair_of"]

# the narrowest pairing taken: GPT-J's interleaved rotation (columns 1 apart) would make tiles
# of one column per half, each a tl.dot of 16 lanes that uses one; it runs as two kernels
MIN_HALF = 4


@dataclass(frozen=True)
class Pair:
    """Columns ``R`` apart in one tile: ``half`` is ``R``, ``tile`` the columns per half."""

    half: int
    tile: int

    @property
    def period(self) -> int:
        return 2 * self.half

    def tiles(self, width: int) -> int:
        """Paired tiles across a product ``width`` columns wide."""
        return width // self.period * math.ceil(self.half / self.tile)

    def lanes(self, row: Body) -> None:
        """Column tile ``tn``'s first-half columns ``n_lo``, their partners ``n_hi`` and the
        column mask (``lane_n`` and ``TILE_H`` as :func:`matmul.tile_lanes` sets them)."""
        per = math.ceil(self.half / self.tile)
        row.line(f"j = (tn % {per}) * TILE_H + lane_n[None, :]")
        row.line(f"n_lo = (tn // {per}) * {self.period} + j")
        row.line(f"n_hi = n_lo + {self.half}")
        row.line(f"nmask = (lane_n[None, :] < TILE_H) & (j < {self.half})")

    def columns(self, width: int, upper: bool) -> np.ndarray:
        """Every column the first (or second) halves of the tiles hold."""
        heads = np.arange(width // self.period)[:, None] * self.period
        cols = (heads + np.arange(self.half)[None, :]).ravel()
        return cols + self.half if upper else cols

    def passes(self, prods: list[Product]) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        """Per half: the line that makes ``n`` its columns, and the exact lanes it holds;
        while the caller writes a half's epilogue, each product answers for that half (its
        accumulator, its columns, its partner's accumulator)."""
        base = [p.acc for p in prods]
        try:
            for upper in (False, True):
                for p, acc in zip(prods, base, strict=True):
                    p.acc = f"{acc}_hi" if upper else f"{acc}_lo"
                    p.columns = self.columns(p.N, upper)
                    p.partner = (-self.half, f"{acc}_lo") if upper else (self.half, f"{acc}_hi")
                yield f"n = {'n_hi' if upper else 'n_lo'}", {"n": self.columns(prods[0].N, upper)}
        finally:
            for p, acc in zip(prods, base, strict=True):
                p.acc, p.columns, p.partner = acc, None, None


def pair_of(
    prods: list[Product], io: KernelIO, reads: list[tuple[Product, Index]], tile_n: int
) -> Pair | None:
    """The pairing under which every read in ``reads`` (a product and an index of it, as the
    epilogue asked) is on the tile, if the reads off it are one shift apart; None when there
    are none or no pairing holds them."""
    shifts: set[int] = set()
    for p, idx in reads:
        shape = io.shape(p.out)
        own = p.out_index(shape)
        if same_index(idx, own, p.env()):
            continue
        if not isinstance(p, MatMul):
            return None
        try:
            delta = evaluate(offset(idx, shape), p.env()) - evaluate(offset(own, shape), p.env())
        except (ValueError, SyntaxError):
            return None
        shifts |= {abs(int(d)) for d in np.unique(delta)} - {0}
    if len(shifts) != 1:
        return None
    half = shifts.pop()
    if half < MIN_HALF or half >= prods[0].N or any(p.N % (2 * half) for p in prods):
        return None
    return Pair(half, min(half, max(16, tile_n // 2)))
