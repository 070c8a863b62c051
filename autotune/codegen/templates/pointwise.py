"""Elementwise, broadcast and layout groups: one flat loop per output size.

Each program takes tiles ``pid, pid + NPROG, ...`` of ``TILE`` consecutive output elements
(the plan's unified-buffer tile, ``ub_rows * ub_cols``); an output element is computed by
reading every input at the index the ops between them imply (:mod:`autotune.codegen.pull`).
Outputs of different sizes (a Split into unequal parts) get a loop each, in one kernel.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

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
    holes: Mapping[str, tuple[str, ...]] | None = None,
) -> None:
    """A loop over the elements of ``outputs`` (all of one size), ``TILE`` per step; used
    also by the cube templates for an output that is not of their anchor's size (a prologue
    tensor another kernel reads), which it computes again from its own inputs, and for the
    holes of an output their tile fills only in part (``holes``: output -> the concat inputs
    the tile writes), which it writes where the tile does not."""
    shape0 = io.shape(outputs[0][1])
    size = numel(shape0)
    inner = body.child()
    inner.line("lane = tl.arange(0, BLOCK)")
    inner.line("x = tile * TILE + lane")
    inner.line(f"mask = (lane < TILE) & (x < {size})")
    pull = Pull(io, inner, LANES)
    for pos, t in outputs:
        shape = io.shape(t)
        pieces = (holes or {}).get(t, ())
        own, taken = _without(io, inner, pieces) if pieces else (pull, [])
        value = own.value(t, unflatten("x", shape), "mask")
        # where a piece the tile writes would have been read, this loop does not store
        mask = (
            own.bind(" & ".join(["mask", *(f"~{paren(m)}" for m in taken)])) if taken else "mask"
        )
        inner.line(store(own.pointer(f"out{pos}", "x", mask), io.dtype(t), value, mask))
    body.nest(f"for tile in range(pid, {math.ceil(size / tile)}, NPROG):", inner)


def _without(io: KernelIO, body: Body, pieces: tuple[str, ...]) -> tuple[Pull, list[str]]:
    """A reader for which ``pieces`` read as zero, and the masks they were asked under
    (the elements that are theirs)."""
    taken: list[str] = []

    def absent(pull: Pull, idx: Index, mask: str) -> str:
        taken.append(mask)
        return "0.0"

    return Pull(io, body, LANES, {t: absent for t in pieces}), taken


def pointwise_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig
) -> KernelSource:
    """The kernel of a group of elementwise and layout ops.

    Raises:
        Unsupported: an op or tensor type no template computes.
    """
    check_outputs(graph, group.outputs)
    io = kernel_io(graph, group)
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
    holes: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[tuple[str, int], ...]:
    """Loops for the outputs not of the anchor's size and not in ``skip`` (those the anchor's
    tile stores), each computed again from its own inputs, and for the holes of those the
    tile stores in part (``holes``, see :func:`flat_loop`); the constexprs they add."""
    by_size: dict[int, list[tuple[int, str]]] = {}
    for pos, t in enumerate(group.outputs):
        if (numel(io.shape(t)) != size and t not in skip) or t in (holes or {}):
            by_size.setdefault(numel(io.shape(t)), []).append((pos, t))
    if not by_size:
        return ()
    tile = max(1, min(1024, max(by_size)))
    for n in sorted(by_size, reverse=True):
        flat_loop(io, by_size[n], body, tile, holes)
    return (("TILE", tile), ("BLOCK", next_pow2(tile)))
