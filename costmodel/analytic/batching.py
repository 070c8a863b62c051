"""Stacking :class:`Kernel` records into :class:`KernelBatch` rows for the analytic model.

Kernels with one *layout* (unit and stream structure: pipes, keys, per, sides, conversions and
which streams share a tensor) stack into one batch even when their tensors differ, so a plan
of twelve identical layers is scored in one vectorised call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from costmodel.exceptions import CostModelError
from costmodel.kernel import BATCH_ROWS, BUFFERS, Kernel, KernelBatch, Stream, StreamBatch
from costmodel.l2_context import tensor_bytes

__all__ = ["batch_layout", "batch_of", "concat", "layout", "load_size", "stack", "tensor_bytes"]


def layout(kernel: Kernel | KernelBatch) -> Hashable:
    """What kernels must share to be rows of one batch (the kind too: it is a feature of the
    learned model, and a batch has one)."""
    first: dict[str, int] = {}
    rows: Sequence[Stream | StreamBatch] = kernel.streams
    streams = tuple(
        (first.setdefault(s.tensor, i), s.pipe, s.key, s.per, s.side, s.nd2nz, s.packed)
        for i, s in enumerate(rows)
    )
    return kernel.unit, kernel.kind, streams


def load_size(stream: StreamBatch, batch: KernelBatch) -> np.ndarray:
    """Bytes of a loaded stream's whole tensor, per config of ``batch`` (from its blocks when
    the lowering left it 0)."""
    return np.maximum(1.0, stream.tensor_bytes or stream.bytes * _blocks(stream.key, batch))


def _blocks(key: str, batch: KernelBatch) -> np.ndarray:
    extents = dict(zip("bijk", (*batch.grid.T, batch.steps), strict=True))
    out = np.ones(len(batch))
    for letter in key:
        out = out * extents[letter]
    return out


def batch_of(kernels: Sequence[Kernel]) -> KernelBatch:
    """Stack configs of one group (same tensors and streams) into a :class:`KernelBatch`.

    Raises:
        CostModelError: no kernels, or kernels whose streams differ.
    """
    if not kernels:
        raise CostModelError("batch_of needs at least one kernel")
    k0 = kernels[0]
    shape = [(s.tensor, s.pipe, s.key, s.per, s.side, s.nd2nz) for s in k0.streams]
    for k in kernels[1:]:
        other = [(s.tensor, s.pipe, s.key, s.per, s.side, s.nd2nz) for s in k.streams]
        if other != shape or k.unit != k0.unit:
            raise CostModelError(
                f"batch_of: kernel '{k.name}' has streams {other}, expected {shape} "
                f"(only configs of one group stack)"
            )
    return stack(kernels)


def stack(kernels: Sequence[Kernel]) -> KernelBatch:
    """Stack kernels of one :func:`layout`; names and tensor sizes are the first kernel's."""
    k0 = kernels[0]

    def col(attr: str, dtype: type = np.float64) -> np.ndarray:
        return np.array([getattr(k, attr) for k in kernels], dtype=dtype)

    streams = tuple(
        StreamBatch(
            tensor=s.tensor,
            pipe=s.pipe,
            bytes=np.array([k.streams[i].bytes for k in kernels], dtype=np.int64),
            row_bytes=np.array([k.streams[i].row_bytes for k in kernels], dtype=np.int64),
            key=s.key,
            per=s.per,
            side=s.side,
            nd2nz=s.nd2nz,
            tensor_bytes=s.tensor_bytes,
            reread=np.array([k.streams[i].reread for k in kernels], dtype=np.float64),
            packed=s.packed,
        )
        for i, s in enumerate(k0.streams)
    )
    bufs = sorted({b for k in kernels for b in k.footprint} & set(BUFFERS))
    return KernelBatch(
        name=k0.name,
        ops=k0.ops,
        kind=k0.kind,
        unit=k0.unit,
        configs=tuple(k.config for k in kernels),
        grid=np.array([k.grid for k in kernels], dtype=np.int64).reshape(len(kernels), 3),
        steps=col("steps", np.int64),
        streams=streams,
        mte1_l0a_bytes=col("mte1_l0a_bytes"),
        mte1_l0b_bytes=col("mte1_l0b_bytes"),
        mmads=col("mmads", np.int64),
        cube_cycles=col("cube_cycles"),
        vector_cycles_step=col("vector_cycles_step"),
        vector_cycles_tile=col("vector_cycles_tile"),
        vector_instrs=col("vector_instrs", np.int64),
        cross_core_syncs=col("cross_core_syncs", np.int64),
        footprint={b: np.array([k.footprint.get(b, 0) for k in kernels]) for b in bufs},
        flops=k0.flops,
        cube_flops=k0.cube_flops,
        compulsory_bytes=k0.compulsory_bytes,
        signature=k0.signature,
    )


def batch_layout(batch: KernelBatch) -> Hashable:
    """:func:`layout` of a batch, and the types of its arrays: what batches must share for
    :func:`concat` to make rows each of which the model scores as in its own batch."""
    dtypes = tuple((s.bytes.dtype.str, s.row_bytes.dtype.str) for s in batch.streams)
    arrays = tuple(getattr(batch, name).dtype.str for name in BATCH_ROWS)
    footprint = tuple(sorted((b, a.dtype.str) for b, a in batch.footprint.items()))
    return layout(batch), dtypes, arrays, footprint


def concat(batches: Sequence[KernelBatch]) -> KernelBatch:
    """The rows of batches of one :func:`batch_layout` (configs of different groups) as one
    batch; names, tensor sizes, FLOPs and compulsory bytes are the first's (a caller that
    needs each row's passes them, as for :func:`stack`).

    Raises:
        CostModelError: no batches, or batches of different layouts.
    """
    if not batches:
        raise CostModelError("concat needs at least one batch")
    b0 = batches[0]
    if any(batch_layout(b) != batch_layout(b0) for b in batches[1:]):
        raise CostModelError("concat: the batches are not of one layout")
    streams = tuple(
        dataclasses.replace(
            s,
            bytes=np.concatenate([b.streams[i].bytes for b in batches]),
            row_bytes=np.concatenate([b.streams[i].row_bytes for b in batches]),
            reread=None
            if all(b.streams[i].reread is None for b in batches)
            else np.concatenate([b.streams[i].reread_share() for b in batches]),
        )
        for i, s in enumerate(b0.streams)
    )
    rows: dict[str, Any] = {
        name: np.concatenate([getattr(b, name) for b in batches]) for name in BATCH_ROWS
    }
    return dataclasses.replace(
        b0,
        configs=tuple(c for b in batches for c in b.configs),
        streams=streams,
        footprint={k: np.concatenate([b.footprint[k] for b in batches]) for k in b0.footprint},
        **rows,
    )
