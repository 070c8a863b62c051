"""Features of a kernel for the learned cost model: one pure, vectorised function.

Every feature is a number per config row, computed from the lowered kernels (a
:class:`KernelBatch`) and the analytic model's breakdown of them: magnitudes on a log scale,
shares and utilisations as fractions. The learned model corrects the analytic latency, so the
analytic stage times are among the features (docs/cost-model.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.analytic import AnalyticModel, Breakdown, score
from costmodel.kernel import BUFFERS, PIPES, Kernel, KernelBatch
from costmodel.measure import RowBatches
from costmodel.spec import HardwareSpec

__all__ = ["FEATURES", "kernel_features", "per_row", "row_features"]

_UNITS = ("cube", "vector", "mixed")
_KINDS = ("attention", "row_reduce", "cube_epilogue", "vector_chain")
FEATURES: tuple[str, ...] = (
    "log_analytic_us",
    "log_fixed",
    "log_body",
    "fixed_share",
    *(f"log_busy_{p}" for p in PIPES),
    *(f"share_{p}" for p in PIPES),
    "log_hbm_tile",
    "hbm_share",
    "log_serial",
    "hit_rate",
    "log_hbm_bytes",
    "hbm_limited",
    "log_flops",
    "cube_flop_share",
    "log_compulsory",
    "log_loaded",
    "log_stored",
    "log_intensity",
    "log_tile_bytes",
    "short_run_share",
    "nd2nz_share",
    "log_grid_b",
    "log_grid_i",
    "log_grid_j",
    "log_steps",
    "log_tiles",
    "cores_share",
    "log_waves",
    "tail",
    "double_buffer",
    "log_mmads",
    "log_vector_instrs",
    "syncs",
    "n_loads",
    "n_stores",
    "log_unique_l2",
    "log_reuse",
    "log_wave_set_l2",
    "max_load_share",
    "handoff_to_cube_share",
    "handoff_to_vector_share",
    "resident_share",
    *(f"use_{b}" for b in BUFFERS),
    *(f"unit_{u}" for u in _UNITS),
    *(f"kind_{k}" for k in _KINDS),
)


@dataclass(frozen=True)
class _Traffic:
    """What a batch's streams move over the kernel, bytes per row: loaded and stored, loads
    of what the kernel itself stores (a prologue's operand to the cube, an epilogue's
    accumulator to the vector side, handed over through L2), one tile's bytes, bytes moved in
    runs shorter than a burst or off the UB's alignment, and loads converted ND -> NZ."""

    loaded: np.ndarray
    stored: np.ndarray
    to_cube: np.ndarray
    to_vector: np.ndarray
    tile_bytes: np.ndarray
    short: np.ndarray
    conv: np.ndarray


def _traffic(
    spec: HardwareSpec, batch: KernelBatch, steps: np.ndarray, tiles: np.ndarray
) -> _Traffic:
    n = len(batch)
    one = np.ones(n)
    loaded, stored, to_cube, to_vector = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    tile_bytes, short, conv = np.zeros(n), np.zeros(n), np.zeros(n)
    own = {s.tensor for s in batch.streams if s.pipe != "MTE2"}
    burst, align = float(spec.gm_burst_bytes), float(spec.ub_align_bytes)
    for s in batch.streams:
        reps = steps if s.per == "step" else one
        moved = s.bytes * reps * tiles
        tile_bytes += s.bytes * reps
        if s.pipe == "MTE2":
            loaded += moved
            conv += moved * s.nd2nz
            if s.tensor in own:
                if s.side == "vector":
                    to_vector += moved
                else:
                    to_cube += moved
        else:
            stored += moved
        run = s.row_bytes.astype(np.float64)
        bad = (run > 0) & ((run < burst) | (np.mod(run, align) != 0))
        short += np.where(bad, moved, 0.0)
    return _Traffic(loaded, stored, to_cube, to_vector, tile_bytes, short, conv)


def _l2_reach(
    batch: KernelBatch, steps: np.ndarray, tiles: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the loads reach in L2, bytes per row: the distinct bytes they touch (a re-read's
    second pass hits), what one wave of cores works on at once, and the largest load."""
    n = len(batch)
    one = np.ones(n)
    unique, wave_set, biggest = np.zeros(n), np.zeros(n), np.zeros(n)
    cores = batch.cores.astype(np.float64)
    extents = {"b": batch.grid[:, 0], "i": batch.grid[:, 1], "j": batch.grid[:, 2], "k": steps}
    for s in batch.streams:
        if s.pipe != "MTE2":
            continue
        reps = steps if s.per == "step" else one
        blocks = one.copy()  # distinct blocks of the tensor: its size, per row of the batch
        for letter in s.key:
            blocks = blocks * extents[letter]
        first = s.bytes if s.reread is None else s.bytes * (1.0 - s.reread)  # re-reads hit L2
        unique += first * blocks
        wave_set += s.bytes * cores
        biggest = np.maximum(biggest, s.bytes * reps * tiles)
    return unique, wave_set, biggest


def kernel_features(
    spec: HardwareSpec,
    batch: KernelBatch,
    b: Breakdown,
    flops: np.ndarray | None = None,
    cube_flops: np.ndarray | None = None,
    compulsory: np.ndarray | None = None,
) -> np.ndarray:
    """The ``(len(batch), len(FEATURES))`` feature matrix of a batch of kernels.

    Args:
        spec: the hardware the kernels were lowered for.
        batch: the kernels (one layout; configs of one group or kernels of one shape class).
        b: the analytic breakdown of ``batch`` (``costmodel.analytic.score``).
        flops, cube_flops, compulsory: per-row values when the rows are different kernels
            (a stacked batch keeps only the first kernel's); default: the batch's own.
    """
    # Long by design: the feature matrix column by column, in the order of FEATURES, so a column
    # and its name sit together (the traffic and L2 sums it reads are their own steps).
    n = len(batch)
    one = np.ones(n)
    flops = one * batch.flops if flops is None else np.asarray(flops, dtype=np.float64)
    cube_flops = one * batch.cube_flops if cube_flops is None else np.asarray(cube_flops, float)
    compulsory = (
        one * batch.compulsory_bytes if compulsory is None else np.asarray(compulsory, float)
    )
    log = np.log1p
    body = np.maximum(b.body, 1e-9)
    busy = [b.busy[p] for p in PIPES]
    waves = np.ceil(batch.tiles / batch.cores)
    phys = spec.vector_cores if batch.unit == "vector" else spec.cube_cores
    steps = batch.steps.astype(np.float64)
    tiles = batch.tiles.astype(np.float64)
    m = _traffic(spec, batch, steps, tiles)
    loaded, stored, moved_all = m.loaded, m.stored, np.maximum(m.loaded + m.stored, 1.0)
    unique, wave_set, biggest = _l2_reach(batch, steps, tiles)
    l2 = float(spec.l2_bytes)
    cols = [
        np.log(np.maximum(b.latency_us, 1e-9)),
        log(b.fixed),
        log(b.body),
        b.fixed / (b.fixed + body),
        *(log(x) for x in busy),
        *(x / body for x in busy),
        log(b.tile_terms["HBM"] * waves),
        b.tile_terms["HBM"] * waves / body,
        log(b.serial),
        b.hit_rate,
        log(b.hbm_bytes),
        b.hbm_share_limited.astype(np.float64),
        log(flops),
        cube_flops / np.maximum(flops, 1.0),
        log(compulsory),
        log(loaded),
        log(stored),
        log(flops / moved_all),
        log(m.tile_bytes),
        m.short / moved_all,
        m.conv / np.maximum(loaded, 1.0),
        *(log(batch.grid[:, i].astype(np.float64)) for i in range(3)),
        log(steps),
        log(tiles),
        batch.cores / phys,
        log(waves),
        tiles / (waves * batch.cores),
        batch.double_buffer.astype(np.float64),
        log(batch.mmads.astype(np.float64)),
        log(batch.vector_instrs.astype(np.float64)),
        batch.cross_core_syncs.astype(np.float64),
        # streams a config moves bytes on (``KernelBatch.kernel`` drops the empty ones)
        sum(((s.pipe == "MTE2") & s.moves).astype(np.float64) for s in batch.streams),
        sum(((s.pipe != "MTE2") & s.moves).astype(np.float64) for s in batch.streams),
        log(unique / l2),
        log(loaded / np.maximum(unique, 1.0)),
        log(wave_set / l2),
        biggest / np.maximum(loaded, 1.0),
        m.to_cube / np.maximum(loaded, 1.0),
        m.to_vector / np.maximum(loaded, 1.0),
        b.resident_share,
        *(
            batch.footprint.get(buf, np.zeros(n)) / float(getattr(spec, f"{buf}_bytes"))
            for buf in BUFFERS
        ),
        *(one * (batch.unit == u) for u in _UNITS),
        *(one * (batch.kind == k) for k in _KINDS),
    ]
    return np.column_stack(cols).astype(np.float64)


def per_row(kernels: Sequence[Kernel], rows: Sequence[int]) -> tuple[np.ndarray, ...]:
    """FLOPs, cube FLOPs and compulsory bytes of the chosen kernels (the per-row features
    a stacked batch does not carry)."""
    return (
        np.array([kernels[i].flops for i in rows], dtype=np.float64),
        np.array([kernels[i].cube_flops for i in rows], dtype=np.float64),
        np.array([kernels[i].compulsory_bytes for i in rows], dtype=np.float64),
    )


def row_features(
    analytic: AnalyticModel,
    kernels: Sequence[Kernel],
    resident: Sequence[Sequence[float]],
    specs: Sequence[HardwareSpec | None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Features and analytic latency of measured rows, each scored in its own context (and on
    its own spec, when ``specs`` names one: rows measured on another SKU of the chip)."""
    batches = RowBatches(kernels, resident, specs)
    X = np.empty((len(kernels), len(FEATURES)))
    lat = np.empty(len(kernels))
    for (rows, batch, res), own in zip(batches.parts, batches.part_specs, strict=True):
        spec = own or analytic.target.spec
        b = score(spec, analytic.constants, batch, res)
        X[rows] = kernel_features(spec, batch, b, *per_row(kernels, list(rows)))
        lat[rows] = b.latency_us
    return X, lat
