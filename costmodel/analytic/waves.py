"""The last wave of a kernel's tiles in the closed form (docs/cost-model.md).

``T`` tiles on ``C`` cores run ``W = ceil(T / C)`` waves, the last on ``T - (W - 1) C`` cores.
HBM is shared by the cores that are running, so a tile of a short last wave draws a larger
share of it than a tile of a full wave: a kernel bound by HBM whose last wave is short is
costed ``(W - 1)`` full tiles plus one tile at its own wave's share, not ``W`` full tiles
(catlass's GEMM at M=20, N=6144 cut into 24 N-tiles on 20 cores: 1.15x its measured time
costed as two full waves, 0.99x so). Every other term of a tile is a core's own, the same in
every wave.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from costmodel.analytic.constants import AnalyticConstants
from costmodel.analytic.pipeline import Breakdown, active_cores, load_hits, score_wave
from costmodel.kernel import KernelBatch
from costmodel.spec import HardwareSpec

__all__ = ["last_wave_cores", "score"]


def last_wave_cores(tiles: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """Cores the last wave of ``tiles`` on ``cores`` runs on (``cores`` when it is full)."""
    waves = np.ceil(tiles / cores)
    return tiles - (waves - 1) * cores


def score(
    spec: HardwareSpec, c: AnalyticConstants, batch: KernelBatch, resident: Sequence[np.ndarray]
) -> Breakdown:
    """Every term of the closed form for every config of ``batch``
    (:func:`~costmodel.analytic.pipeline.score_wave`), a short last wave's tile at its own HBM
    share (the module docstring); ``resident``: per load stream, the fraction of its tensor
    already in L2."""
    hits = load_hits(spec, c, batch, resident)  # the same in every wave
    full = score_wave(spec, c, batch, resident, hits=hits)
    cores = active_cores(spec, batch)
    last = last_wave_cores(batch.tiles.astype(np.float64), cores)
    short = last < cores
    if not short.any():
        return full
    sharing = np.where(short, last, cores)
    tail = score_wave(spec, c, batch, resident, sharing=sharing, hits=hits)
    body = full.body + np.where(short, tail.tile - full.tile, 0.0)
    return dataclasses.replace(
        full, body=body, latency_us=(full.fixed + body) / spec.clock_hz * 1e6
    )
