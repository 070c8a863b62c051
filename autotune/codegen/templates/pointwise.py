"""Elementwise, broadcast and layout groups: one flat loop per output size.

Each program takes tiles ``pid, pid + NPROG, ...`` of ``TILE`` consecutive output elements
(the plan's unified-buffer tile, ``ub_rows * ub_cols``); an output element is computed by
reading every input at the index the ops between them imply (:mod:`autotune.codegen.pull`).
Outputs of different sizes (a Split into unequal parts) get a loop each, in one kernel.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, numel, unflatten
from autotune.codegen.pull import KernelIO, Pull, lanes
from autotune.codegen.source import Body, paren
from autotune.codegen.templates.common import (
    KernelSource,
    check_outputs,
    finish,
    kernel_io,
    next_pow2,
    store,
)
from search_space.ir import FusionGroup, Graph, KernelConfig

__all__ = ["LANES", "flat_loop", "pointwise_kernel", "side_outputs", "tile_of"]

LANES = lanes({"X": (0, "BLOCK")}, x="X", lane="X", mask="X")


def tile_of(config: KernelConfig, size: int) -> int:
    """Elements per step: the plan's UB tile, never more than the largest output."""
    tile = max(1, (config.ub_rows or 1) * (config.ub_cols or 1024))
    return max(1, min(tile, size))


def flat_loop(
    io: KernelIO,
    outputs: list[tuple[int, str]],
    body: Body,
    tile: int,
    pieces: Mapping[str, str] | None = None,
) -> None:
    """A loop over the elements of ``outputs`` (all of one size), ``TILE`` per step; used
    also by the cube templates for an output that is not of their anchor's size (a prologue
    tensor another kernel reads), which it computes again from its own inputs, and for an
    output their tile fills only in part (``pieces``: output -> the input of a Concat or a
    ScatterND the tile writes through), whose other elements (its holes) it writes.

    Raises:
        Unsupported: such an output reads the tile's piece more than once (a concat of it
            and an activation of it): its holes are not one region.
    """
    shape0 = io.shape(outputs[0][1])
    size = numel(shape0)
    inner = body.child()
    inner.line("lane = tl.arange(0, BLOCK)")
    inner.line("x = tile * TILE + lane")
    inner.line(f"mask = (lane < TILE) & (x < {size})")
    pull = Pull(io, inner, LANES)
    for pos, t in outputs:
        piece = (pieces or {}).get(t, "")
        own, taken = _without(io, inner, piece) if piece else (pull, [])
        value = own.value(t, unflatten("x", io.shape(t)), "mask")
        if piece and len(taken) != 1:
            raise Unsupported(f"'{t}' reads the tile's piece '{piece}' more than once")
        # the tile wrote the elements its piece is read for: this loop stores the others
        mask = own.bind(f"mask & ~{paren(taken[0])}", "mask") if taken else "mask"
        inner.line(
            store(own.pointer(f"out{pos}", "x", mask), io.storage(t), io.fit(t, value), mask)
        )
    body.nest(f"for tile in range(pid, {math.ceil(size / tile)}, NPROG):", inner)


def _without(io: KernelIO, body: Body, piece: str) -> tuple[Pull, list[str]]:
    """A reader for which ``piece`` reads as zero, and the masks it was read under (the
    elements that are the piece's)."""
    taken: list[str] = []

    def absent(pull: Pull, idx: Index, mask: str) -> str:
        taken.append(mask)
        return "0.0"

    return Pull(io, body, LANES, {piece: absent}), taken


def pointwise_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> KernelSource:
    """The kernel of a group of elementwise and layout ops.

    Raises:
        Unsupported: an op or tensor type no template computes.
    """
    check_outputs(graph, group.outputs)
    io = kernel_io(graph, group, precision)
    by_size: dict[int, list[tuple[int, str]]] = {}
    for pos, t in enumerate(group.outputs):
        by_size.setdefault(numel(io.shape(t)), []).append((pos, t))
    largest = max(by_size)
    tile = tile_of(config, largest)
    body = Body(1)
    for size in sorted(by_size, reverse=True):
        flat_loop(io, by_size[size], body, tile)
    tiles = math.ceil(largest / tile)
    blocks = (("TILE", tile), ("BLOCK", next_pow2(tile)))
    return finish(name, graph, group, config, io, body, tiles, blocks, "pointwise")


def side_outputs(
    io: KernelIO,
    group: FusionGroup,
    size: int,
    body: Body,
    skip: Collection[str] = (),
    pieces: Mapping[str, str] | None = None,
) -> tuple[tuple[str, int], ...]:
    """Loops for the outputs not of the anchor's size and not in ``skip`` (those the anchor's
    tile stores), each computed again from its own inputs, and for the holes of those the
    tile stores in part (``pieces``, see :func:`flat_loop`); the constexprs they add."""
    by_size: dict[int, list[tuple[int, str]]] = {}
    for pos, t in enumerate(group.outputs):
        if (numel(io.shape(t)) != size and t not in skip) or t in (pieces or {}):
            by_size.setdefault(numel(io.shape(t)), []).append((pos, t))
    if not by_size:
        return ()
    tile = max(1, min(1024, max(by_size)))
    for n in sorted(by_size, reverse=True):
        flat_loop(io, by_size[n], body, tile, pieces)
    return (("TILE", tile), ("BLOCK", next_pow2(tile)))
