"""GEMV-shaped matmuls: a few rows (a decode step's batch) against a weight.

The cube pads the rows to its 16-row fractal, so such a matmul computes next to nothing and
is bound by reading B (the weights) once; only the columns of N can spread that read over the
cores. Each core streams the ``K x base_n`` panel of its column block through its own GM path
(``HardwareSpec.gm_read_bytes_per_cycle``: 115.2 GB/s for a 910B AIC), so the weights arrive
at the chip's HBM rate only when at least half the cores have a column block, and the kernel
ends with its busiest core: in as few, as even waves as the columns allow. Powers of two do
that badly on 24 cores (N = 4096 splits into 8, 16 or 32 column blocks), so the grid also
holds the ``base_n`` that gives each core one block (:func:`spread_n`), and the
default config (:func:`gemv_default`) is the tiling that loads the fewest bytes on its busiest
core, not the largest tile (docs/cost-model.md, "Decode kernels").
"""

from __future__ import annotations

from collections.abc import Sequence

from costmodel.kernel import KernelConfig
from costmodel.lower.cube_work import FRACTAL, GEMV_ROWS, CubeWork

__all__ = ["GEMV_ROWS", "cube_tiles", "gemv_default", "is_gemv", "spread_n"]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def cube_tiles(work: CubeWork, config: KernelConfig) -> int:
    """How many output tiles a matmul has under ``config``: one per core at most runs at once."""
    return work.batch * _ceil(work.M, config.base_m) * _ceil(work.N, config.base_n)


def is_gemv(work: CubeWork, cores: int) -> bool:
    """Whether the matmul is GEMV-shaped: at most :data:`GEMV_ROWS` rows against each B (a
    batched B has its own rows; a shared one, every batch's), and fewer 16-row blocks than
    ``cores``, so its columns must be split for every core to work."""
    rows = work.M * (1 if work.b_batched else work.batch)
    return rows <= GEMV_ROWS and work.batch * _ceil(work.M, FRACTAL) < cores


def spread_n(work: CubeWork, base_m: int, cores: Sequence[int]) -> dict[int, int]:
    """For a GEMV-shaped matmul (none for another) tiled ``base_m`` rows deep, per core count,
    the ``base_n`` (a multiple of 16, short of N) that splits N into enough column blocks for
    each of that many cores to get one tile."""
    rows = work.batch * _ceil(work.M, base_m)
    out: dict[int, int] = {}
    if not is_gemv(work, max(cores)):
        return out
    for c in cores:
        bn = _ceil(_ceil(work.N, _ceil(c, rows)), FRACTAL) * FRACTAL
        if rows < c and bn < work.N:
            out[c] = bn
    return out


def gemv_default(work: CubeWork, pool: Sequence[KernelConfig], cores: int) -> KernelConfig:
    """The config a hand-written GEMV, or a matmul whose largest tiles are fewer than the
    cores, would run: the fewest bytes through its busiest core's
    GM path (waves x the A and B panels of a tile, ``(rows + columns) x K``), then the largest
    tiles, the deepest ``base_k``."""

    def load(c: KernelConfig) -> int:
        gi, gj = _ceil(work.M, c.base_m), _ceil(work.N, c.base_n)
        me = min(c.base_m, _ceil(_ceil(work.M, gi), FRACTAL) * FRACTAL)
        ne = min(c.base_n, _ceil(_ceil(work.N, gj), FRACTAL) * FRACTAL)
        return _ceil(cube_tiles(work, c), min(cores, c.block_dim)) * (me + ne)

    return min(pool, key=lambda c: (load(c), -c.base_m * c.base_n, -c.base_k, -c.base_n))
