"""Kernels built by hand the way the lowering writes them (a matmul and an elementwise Add).

Shared by the analytic tests and the contract suite, so neither depends on ``costmodel.lower``.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.kernel import Kernel, KernelConfig, Stream
from costmodel.spec import HardwareSpec

FP16 = 2


def matmul(
    size: int | tuple[int, int, int] = 1024,
    l1: tuple[int, int, int] = (128, 256, 256),  # the lowering's 910B default
    l0: tuple[int, int, int] = (128, 128, 128),
    block_dim: int = 24,
    double_buffer: bool = True,
    out_itemsize: int = FP16,
    a: str = "a",
    b: str = "b",
    out: str = "c",
    spec: HardwareSpec | None = None,
    nd2nz: bool = False,
) -> Kernel:
    """``out[M, N] = a[M, K] @ b[K, N]`` in fp16: grid (1, M/bm, N/bn), K/bk steps.

    ``b`` is a weight (already in the NZ layout); ``nd2nz`` makes ``a`` an activation converted
    on the fly.
    """
    big_m, big_n, big_k = (size, size, size) if isinstance(size, int) else size
    bm, bn, bk = l1
    m, n, k = l0
    slots = 2 if double_buffer else 1
    mmads = (bm // m) * (bn // n) * (bk // k)
    fixed = spec.mmad_fixed_cycles if spec else 24
    sa = Stream(a, "MTE2", bm * bk * FP16, "bik", nd2nz=nd2nz, tensor_bytes=big_m * big_k * FP16)
    sb = Stream(b, "MTE2", bk * bn * FP16, "kj", tensor_bytes=big_k * big_n * FP16)
    sc = Stream(
        out,
        "FIX",
        bm * bn * out_itemsize,
        "bij",
        "tile",
        tensor_bytes=big_m * big_n * out_itemsize,
    )
    rows = (bk * FP16, bn * FP16, bn * out_itemsize)  # contiguous run of one block row in GM
    return Kernel(
        name=f"mm_{out}",
        ops=(f"matmul_{out}",),
        kind="single",
        unit="cube",
        config=KernelConfig(block_dim, bm, bn, bk, m, n, k, double_buffer=double_buffer),
        grid=(1, big_m // bm, big_n // bn),
        steps=big_k // bk,
        streams=tuple(replace(st, row_bytes=r) for st, r in zip((sa, sb, sc), rows, strict=True)),
        mte1_l0a_bytes=bm * bk * FP16,
        mte1_l0b_bytes=bk * bn * FP16,
        mmads=mmads,
        cube_cycles=mmads * fixed + bm * bn * bk / 4096,
        footprint={
            "l1": (bm * bk + bk * bn) * FP16 * slots,
            "l0a": m * k * FP16 * slots,
            "l0b": k * n * FP16 * slots,
            "l0c": bm * bn * 4,  # the tile's whole fp32 accumulator, one slot
        },
        flops=2 * big_m * big_n * big_k,
        cube_flops=2 * big_m * big_n * big_k,
        compulsory_bytes=(big_m * big_k + big_k * big_n) * FP16 + big_m * big_n * out_itemsize,
    )


def add(
    elements: int = 1 << 20,
    tile: int = 16384,
    block_dim: int = 48,
    double_buffer: bool = True,
    x: str = "x",
    y: str = "y",
    out: str = "z",
) -> Kernel:
    """``out = x + y`` in fp16 on vector cores: grid (1, elements/tile, 1), one step."""
    tiles = max(1, elements // tile)
    nbytes = tile * FP16
    slots = 2 if double_buffer else 1
    return Kernel(
        name=f"add_{out}",
        ops=(f"add_{out}",),
        kind="single",
        unit="vector",
        config=KernelConfig(block_dim, ub_rows=1, ub_cols=tile, double_buffer=double_buffer),
        grid=(1, tiles, 1),
        steps=1,
        streams=(
            Stream(x, "MTE2", nbytes, "i", "tile", "vector", False, tiles * nbytes, nbytes),
            Stream(y, "MTE2", nbytes, "i", "tile", "vector", False, tiles * nbytes, nbytes),
            Stream(out, "MTE3", nbytes, "i", "tile", "vector", False, tiles * nbytes, nbytes),
        ),
        vector_cycles_tile=nbytes / 256 + 20,
        vector_instrs=1,
        footprint={"ub": 3 * nbytes * slots},
        flops=tiles * tile,
        compulsory_bytes=3 * tiles * nbytes,
    )


def matmul_gelu(
    size: int = 1024,
    l1: tuple[int, int, int] = (128, 128, 256),
    l0: tuple[int, int, int] = (128, 128, 64),
    block_dim: int = 24,
    double_buffer: bool = True,
    out: str = "g",
) -> Kernel:
    """A mixed kernel on a split chip: matmul, then GELU on vector cores via a GM/L2 hand-off.

    The cube stores the tile of ``h`` (FIX) and the vector side loads it back (MTE2), applies
    GELU (a half-rate op) and stores ``out`` (MTE3), one cross-core flag per tile.
    """
    mm = matmul(size, l1, l0, block_dim, double_buffer, out="h")
    bm, bn, _ = l1
    slots = 2 if double_buffer else 1
    tile_bytes = bm * bn * FP16
    full = size * size * FP16
    return Kernel(
        name=f"mm_gelu_{out}",
        ops=("matmul_h", f"gelu_{out}"),
        kind="cube_epilogue",
        unit="mixed",
        config=mm.config,
        grid=mm.grid,
        steps=mm.steps,
        streams=(
            *mm.streams,
            Stream("h", "MTE2", tile_bytes, "bij", "tile", "vector", False, full, bn * FP16),
            Stream(out, "MTE3", tile_bytes, "bij", "tile", "vector", False, full, bn * FP16),
        ),
        mte1_l0a_bytes=mm.mte1_l0a_bytes,
        mte1_l0b_bytes=mm.mte1_l0b_bytes,
        mmads=mm.mmads,
        cube_cycles=mm.cube_cycles,
        vector_cycles_tile=tile_bytes / 128 + 8 * 20,
        vector_instrs=8,
        cross_core_syncs=1,
        footprint={**mm.footprint, "ub": 2 * tile_bytes * slots},
        flops=mm.flops + 8 * size * size,
        cube_flops=mm.cube_flops,
        compulsory_bytes=2 * full + full,
    )


def gelu(
    size: int = 1024, tile: int = 16384, block_dim: int = 48, x: str = "h", out: str = "g"
) -> Kernel:
    """The GELU epilogue of :func:`matmul_gelu` as its own vector kernel (``size**2`` fp16)."""
    k = add(size * size, tile, block_dim, x=x, out=out)
    nbytes = tile * FP16
    return replace(
        k,
        name=f"gelu_{out}",
        ops=(f"gelu_{out}",),
        streams=(k.streams[0], k.streams[2]),
        vector_cycles_tile=nbytes / 128 + 8 * 20,
        vector_instrs=8,
        footprint={"ub": 2 * nbytes * (2 if k.config.double_buffer else 1)},
        compulsory_bytes=2 * size * size * FP16,
    )
