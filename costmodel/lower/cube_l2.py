"""L2 column groups of a matmul whose weights overflow the L2 (CANN's MatMul "L2 tiling").

A matmul's tiles run in row-major order over ``i, j``: each row of output tiles sweeps the
whole of B. When B is larger than the L2 can hold beside the A panels and the output rows
streaming past it, the sweep of one row has evicted B's first columns by the time the next
row asks for them (a cyclic scan defeats LRU), so every row reads all of B from HBM again:
a ``[10240, 10240] x [10240, 10240]`` fp16 matmul would move ~10x its operands.

CANN's own MatMul kernel (``MatMulV3``, public in ``hicann/ops-nn``) cuts the output into L2
tiles (``mTileCntL2 x nTileCntL2`` blocks of base tiles) and has every core finish one L2
tile before any starts the next, so an L2 tile's B columns stay resident while all its rows
pass. The template here offers the column cut (``nTileCntL2``; the row cut buys nothing,
since a row panel of A is already reused across the consecutive tiles of its row): the knob
``l2_groups = g`` cuts N into ``g`` groups, each a ``[M, N/g]`` matmul against a ``[K, N/g]``
slice of B, run one after another. Lowered as ``g`` batches of one matmul with a shared A
(grid letter ``b`` is the group, outermost in tile order): B is read once, A once per group.

The knob is offered when B alone overflows the L2 (below that, a row's sweep of B plus the
few A panels and output rows of a wave fits, and rows of tiles find B resident: an 8192 fp16
matmul's 128 MiB B on the 910B's 192 MiB); a group's B slice then takes at most half the L2
(:data:`L2_SHARE`), leaving the rest to the A panels and output rows that stream past it. A
matmul the knob cannot describe is not offered it (a batched or convolution anchor, an
epilogue that reduces whole output rows, N not a multiple of 16 per group).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec

import numpy as np

from costmodel.kernel import BATCH_ROWS, KernelBatch, KernelConfig, StreamBatch
from costmodel.lower.cube_work import FRACTAL, CubeWork
from costmodel.spec import Target

__all__ = [
    "KNOB",
    "L2_SHARE",
    "default_groups",
    "grouped_work",
    "in_l2_groups",
    "l2_group_choices",
    "merge_rows",
    "with_groups",
]

P = ParamSpec("P")
KNOB = "l2_groups"
L2_SHARE = 2  # a group's B slice takes at most 1 / L2_SHARE of the L2
_CHOICES = 2  # group counts offered: the fewest that fit, and the next


def l2_group_choices(work: CubeWork, target: Target) -> tuple[int, ...]:
    """The group counts offered for ``work`` (none when B fits the L2 or the cut cannot
    apply): the fewest groups whose B slice fits :data:`L2_SHARE`, and the next count that
    divides N."""
    l2 = target.spec.l2_bytes
    if work.batch != 1 or work.conv or work.full_row or work.b_bytes <= l2:
        return ()
    if work.N % FRACTAL:
        return ()
    cols = work.N // FRACTAL
    fits = [g for g in range(2, cols + 1) if cols % g == 0 and work.b_bytes * L2_SHARE <= l2 * g]
    return tuple(fits[:_CHOICES])


def default_groups(work: CubeWork, target: Target) -> int:
    """The group count a default (CANN-like) config runs: the fewest that fit, else 1."""
    choices = l2_group_choices(work, target)
    return choices[0] if choices else 1


def with_groups(config: KernelConfig, groups: int) -> KernelConfig:
    """``config`` run in ``groups`` L2 column groups (the knob merged into its knobs)."""
    knobs = dict(config.knobs)
    knobs[KNOB] = groups
    return dataclasses.replace(config, knobs=tuple(sorted(knobs.items())))


def grouped_work(work: CubeWork, groups: int) -> CubeWork:
    """One group of ``work`` as a batch of ``groups`` matmuls with a shared A: B (and so its
    per-batch share) batched, N a group's columns; FLOPs and sizes stay the whole matmul's."""
    return dataclasses.replace(work, batch=groups, N=work.N // groups, b_batched=True)


def _identity(s: StreamBatch) -> tuple[object, ...]:
    return (s.tensor, s.pipe, s.key, s.per, s.side, s.nd2nz, s.tensor_bytes)


def _scatter(n: int, parts: Sequence[tuple[np.ndarray, np.ndarray]], dtype: Any) -> np.ndarray:
    """Rows ``rows`` of an ``n``-row array from each part (``dtype`` None: the first's)."""
    first = parts[0][1]
    out = np.zeros((n, *first.shape[1:]), dtype=first.dtype if dtype is None else dtype)
    for rows, values in parts:
        out[rows] = values
    return out


def merge_rows(
    parts: Sequence[tuple[np.ndarray, KernelBatch]], configs: Sequence[KernelConfig]
) -> KernelBatch:
    """One batch whose row ``r`` is the row of the part that holds ``r`` (``parts`` are
    ``(rows, batch)`` pairs covering ``0 .. len(configs) - 1``). A stream only some parts
    have (B and per-column inputs keyed by the group letter) moves no bytes in the others'
    rows, so their kernels do not have it."""
    n = len(configs)
    order: list[tuple[object, ...]] = []
    first: dict[tuple[object, ...], StreamBatch] = {}
    for _, batch in parts:
        prev = -1  # a part's new stream goes right after its predecessor: its kernels keep
        for s in batch.streams:  # their streams in the order they are lowered in alone
            ident = _identity(s)
            if ident not in first:
                first[ident] = s
                order.insert(prev + 1, ident)
            prev = order.index(ident)
    streams = []
    for ident in order:
        held = [(rows, s) for rows, b in parts for s in b.streams if _identity(s) == ident]
        reread = None
        if any(s.reread is not None for _, s in held):
            reread = _scatter(n, [(r, s.reread_share()) for r, s in held], np.float64)
        streams.append(
            dataclasses.replace(
                first[ident],
                bytes=_scatter(n, [(r, s.bytes) for r, s in held], np.int64),
                row_bytes=_scatter(n, [(r, s.row_bytes) for r, s in held], np.int64),
                reread=reread,
            )
        )
    b0 = parts[0][1]
    rows_of: dict[str, Any] = {
        name: _scatter(n, [(r, getattr(b, name)) for r, b in parts], None) for name in BATCH_ROWS
    }
    buffers = sorted({k for _, b in parts for k in b.footprint})
    footprint = {}
    for k in buffers:
        sizes = [(r, b.footprint.get(k, np.zeros(len(r), np.int64))) for r, b in parts]
        footprint[k] = _scatter(n, sizes, None)
    return dataclasses.replace(
        b0, configs=tuple(configs), streams=tuple(streams), footprint=footprint, **rows_of
    )


def _keyed_by_group(batch: KernelBatch) -> KernelBatch:
    """A grouped part's per-column streams (bias, per-channel epilogue inputs: key ``j``)
    indexed by the group too, as the column they read is the group's ``j``-th."""
    streams = tuple(dataclasses.replace(s, key="bj") if s.key == "j" else s for s in batch.streams)
    return dataclasses.replace(batch, streams=streams)


def in_l2_groups(
    lower: Callable[Concatenate[CubeWork, list[KernelConfig], P], KernelBatch],
) -> Callable[Concatenate[CubeWork, list[KernelConfig], P], KernelBatch]:
    """``lower(work, configs, ...)`` made to take configs of several group counts: each
    count's configs lowered on its :func:`grouped_work`, the rows merged back in order."""

    @functools.wraps(lower)
    def in_groups(
        work: CubeWork, configs: list[KernelConfig], *args: P.args, **kwargs: P.kwargs
    ) -> KernelBatch:
        counts = np.array([c.knob(KNOB, 1) for c in configs], dtype=np.int64)
        if (counts == 1).all():
            return lower(work, configs, *args, **kwargs)
        parts = []
        for g in sorted({int(c) for c in counts}):
            rows = np.flatnonzero(counts == g)
            subset = [configs[int(r)] for r in rows]
            part = lower(work if g == 1 else grouped_work(work, g), subset, *args, **kwargs)
            parts.append((rows, part if g == 1 else _keyed_by_group(part)))
        return merge_rows(parts, configs)

    return in_groups
