"""Hand-built kernels (as a matmul or elementwise lowering writes them) for the simulator tests."""

from __future__ import annotations

from dataclasses import replace

from costmodel.base import KernelCost
from costmodel.kernel import Kernel, KernelConfig, Stream
from costmodel.simulator import SimulatorModel
from costmodel.spec import Target, load_target

T910B = load_target("ascend910b")
SPEC = T910B.spec
FP16 = 2
GAP_HEAD_US = (SPEC.kernel_gap_s + SPEC.kernel_fixed_cycles / SPEC.clock_hz) * 1e6


# -- kernels by hand ----------------------------------------------------------------------------
def matmul(
    size: int | tuple[int, int, int],
    l1: tuple[int, int, int] = (256, 256, 256),
    l0: tuple[int, int, int] = (128, 128, 128),
    block_dim: int = 24,
    double_buffer: bool = True,
    a: str = "a",
    b: str = "b",
    out: str = "c",
) -> Kernel:
    """fp16 ``out = a @ b``: grid (1, M/bm, N/bn), K/bk steps, B a weight (no nd2nz)."""
    big_m, big_n, big_k = (size, size, size) if isinstance(size, int) else size
    bm, bn, bk = l1
    m, n, k = l0
    slots = 2 if double_buffer else 1
    mmads = (bm // m) * (bn // n) * (bk // k)
    return Kernel(
        name=f"mm_{out}",
        ops=(f"mm_{out}",),
        kind="single",
        unit="cube",
        config=KernelConfig(block_dim, bm, bn, bk, m, n, k, double_buffer=double_buffer),
        grid=(1, big_m // bm, big_n // bn),
        steps=big_k // bk,
        streams=(
            Stream(
                a,
                "MTE2",
                bm * bk * FP16,
                "bik",
                "step",
                "cube",
                False,
                big_m * big_k * FP16,
                bk * FP16,
            ),
            Stream(
                b,
                "MTE2",
                bk * bn * FP16,
                "kj",
                "step",
                "cube",
                False,
                big_k * big_n * FP16,
                bn * FP16,
            ),
            Stream(
                out,
                "FIX",
                bm * bn * FP16,
                "bij",
                "tile",
                "cube",
                False,
                big_m * big_n * FP16,
                bn * FP16,
            ),
        ),
        mte1_l0a_bytes=bm * bk * FP16,
        mte1_l0b_bytes=bk * bn * FP16,
        mmads=mmads,
        cube_cycles=mmads * 24 + bm * bn * bk / 4096,
        footprint={
            "l1": (bm * bk + bk * bn) * FP16 * slots,
            "l0a": m * k * FP16 * slots,
            "l0b": k * n * FP16 * slots,
            "l0c": m * n * 4 * slots,
        },
        flops=2 * big_m * big_n * big_k,
        cube_flops=2 * big_m * big_n * big_k,
        compulsory_bytes=(big_m * big_k + big_k * big_n + big_m * big_n) * FP16,
    )


def add(
    elements: int,
    tile: int = 16384,
    block_dim: int = 48,
    double_buffer: bool = True,
    x: str = "x",
    y: str = "y",
    out: str = "z",
) -> Kernel:
    """fp16 ``out = x + y`` on vector cores: grid (1, elements/tile, 1), one step."""
    tiles = max(1, elements // tile)
    nb = min(tile, elements) * FP16
    slots = 2 if double_buffer else 1
    return Kernel(
        name=f"add_{out}",
        ops=(f"add_{out}",),
        kind="single",
        unit="vector",
        config=KernelConfig(block_dim, ub_rows=1, ub_cols=tile, double_buffer=double_buffer),
        grid=(1, tiles, 1),
        steps=1,
        streams=tuple(
            Stream(t, pipe, nb, "i", "tile", "vector", False, tiles * nb, nb)
            for t, pipe in ((x, "MTE2"), (y, "MTE2"), (out, "MTE3"))
        ),
        vector_cycles_tile=nb / 256 + 20,
        vector_instrs=1,
        footprint={"ub": 3 * nb * slots},
        flops=tiles * tile,
        compulsory_bytes=3 * tiles * nb,
    )


def matmul_gelu(size: int = 1024, block_dim: int = 8, out: str = "g") -> Kernel:
    """A split-chip mixed kernel: matmul, FIX to GM/L2, GELU on the AIV pair, MTE3 out."""
    mm = matmul(size, (128, 128, 256), (128, 128, 64), block_dim, out="h")
    tile = 128 * 128 * FP16
    full = size * size * FP16
    return replace(
        mm,
        name=f"mm_gelu_{out}",
        unit="mixed",
        kind="cube_epilogue",
        streams=(
            *mm.streams,
            Stream("h", "MTE2", tile, "bij", "tile", "vector", False, full, 256),
            Stream(out, "MTE3", tile, "bij", "tile", "vector", False, full, 256),
        ),
        vector_cycles_tile=tile / 128 + 160,
        cross_core_syncs=1,
        footprint={**mm.footprint, "ub": 4 * tile},
    )


def model(spec=SPEC, **kw) -> SimulatorModel:
    return SimulatorModel(Target(spec), **kw)


def one(k: Kernel, spec=SPEC, **kw) -> KernelCost:
    return model(spec, **kw).evaluate([k])[0]
