"""Lowering of cube groups: MatMul/Gemm/Conv alone, with FixPipe or vector epilogues
(``cube_epilogue``), and sibling matmuls sharing an input (``horizontal_cube``).

A cube kernel tiles the output ``M x N`` (per batch) into ``base_m x base_n`` L1 blocks, one per
tile, and walks ``K`` in ``base_k`` steps; each step moves an A panel (``b, i, k``) and a B panel
(``k, j``) GM -> L1, then L1 -> L0 in ``m x k`` / ``k x n`` pieces for the Mmads. Convolutions
are implicit-im2col matmuls (``M = N*Ho*Wo``, ``K = Cin/g*kh*kw``, ``N = Cout/g``) whose input
panel is loaded once per window reuse. Bias, ReLU-family activations, BatchNorm's per-channel
affine and dtype casts ride on FixPipe for free; any other epilogue runs on the vector cores of
a mixed kernel (the tile crosses L0C -> GM/L2 -> UB on the split 910B, L0C -> UB on a coupled
chip).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from costmodel.kernel import KernelBatch, KernelConfig, StreamBatch, workspace
from costmodel.lower.common import ceil_div, ceil_to, pow2_choices, vector_cost
from costmodel.lower.cube_gemv import spread_n
from costmodel.lower.cube_l2 import in_l2_groups, l2_group_choices, with_groups
from costmodel.lower.cube_work import CubeWork, analyse_cube, ub_need
from costmodel.spec import Target

__all__ = ["CubeWork", "analyse_cube", "cube_fits", "cube_grid", "lower_cube"]


def _l0_tile(bm: int, bn: int, bk: int, item: int, db: bool, target: Target) -> tuple[int, ...]:
    spec = target.spec
    return _l0_tile_of(bm, bn, bk, item, db, spec.l0a_bytes, spec.l0b_bytes)


@functools.lru_cache(maxsize=4096)
def _l0_tile_of(
    bm: int, bn: int, bk: int, item: int, db: bool, l0a_bytes: int, l0b_bytes: int
) -> tuple[int, ...]:
    """The largest L0 tile of an L1 block (a grid asks the same few blocks many times)."""
    f = 2 if db else 1
    best: tuple[int, ...] = (16, 16, 16)
    for m in pow2_choices(bm, hi=bm if bm & (bm - 1) == 0 else 512):
        for n in pow2_choices(bn, hi=max(16, 1 << (bn.bit_length() - 1))):
            for k in pow2_choices(bk, hi=max(16, 1 << (bk.bit_length() - 1))):
                if m > bm or n > bn or k > bk:
                    continue
                if m * k * item * f > l0a_bytes or k * n * item * f > l0b_bytes:
                    continue
                if (m * n * k, k) > (best[0] * best[1] * best[2], best[2]):
                    best = (m, n, k)
    return best


def cube_grid(work: CubeWork, target: Target) -> list[KernelConfig]:
    """Feasible two-level tilings (L1 block, L0 tile), both buffering modes, all/half cores;
    a GEMV-shaped one also splits N evenly over the cores (:mod:`.cube_gemv`)."""
    return list(_cube_configs(work, target))


def cube_fits(work: CubeWork, target: Target) -> bool:
    """Whether :func:`cube_grid` has a config, found at its first one (a repair asks this of
    thousands of merges whose grids are never needed)."""
    return next(_cube_configs(work, target), None) is not None


def _cube_configs(work: CubeWork, target: Target) -> Iterator[KernelConfig]:
    """The configs of :func:`cube_grid`, in its order, made one at a time."""
    spec = target.spec
    ci = work.cube_item
    bms = pow2_choices(work.M)
    bns = pow2_choices(work.N)
    bks = pow2_choices(work.K, lo=32)
    cores = sorted({spec.cube_cores, max(1, spec.cube_cores // 2)}, reverse=True)
    groups = l2_group_choices(work, target)
    for db in (True, False):
        f = 2 if db else 1
        for bm in bms:
            spread = spread_n(work, bm, cores)
            for bn in bns + [b for b in spread.values() if b not in bns]:
                if bm * bn * 4 > spec.l0c_bytes:
                    continue
                for bk in bks:
                    if (bm * bk + bk * bn) * ci * f + bn * 4 > spec.l1_bytes:
                        continue
                    if work.mixed and ub_need(work, bm, bn, bk, db, spec.ub_bytes) > spec.ub_bytes:
                        continue
                    m, n, k = _l0_tile(bm, bn, bk, ci, db, target)
                    for c in cores:
                        if bn not in bns and spread.get(c) != bn:  # a spread for its cores
                            continue
                        config = KernelConfig(c, bm, bn, bk, m, n, k, double_buffer=db)
                        yield config
                        if bm < work.M:  # rows of tiles re-read B: L2 column groups (cube_l2)
                            fit = (g for g in groups if bn <= work.N // g)
                            yield from (with_groups(config, g) for g in fit)


@dataclass(frozen=True)
class _Tiling:
    """The tile geometry of many configs of one cube group, one array entry per config."""

    arr: dict[str, np.ndarray]  # base_m, base_n, base_k, m, n, k
    db: np.ndarray  # double buffered
    gi: np.ndarray  # tiles along M and N, steps along K
    gj: np.ndarray
    steps: np.ndarray
    me: np.ndarray  # the effective (balanced, 16-aligned) block extents
    ne: np.ndarray
    ke: np.ndarray

    @classmethod
    def of(cls, work: CubeWork, configs: list[KernelConfig]) -> _Tiling:
        arr = {
            f: np.array([getattr(c, f) for c in configs], dtype=np.int64)
            for f in ("base_m", "base_n", "base_k", "m", "n", "k")
        }
        db = np.array([c.double_buffer for c in configs], dtype=bool)
        gi, gj = ceil_div(work.M, arr["base_m"]), ceil_div(work.N, arr["base_n"])
        steps = ceil_div(work.K, arr["base_k"])
        me = np.minimum(arr["base_m"], ceil_to(ceil_div(work.M, gi), 16))
        ne = np.minimum(arr["base_n"], ceil_to(ceil_div(work.N, gj), 16))
        ke = np.minimum(arr["base_k"], ceil_to(ceil_div(work.K, steps), 16))
        return cls(arr, db, gi, gj, steps, me, ne, ke)


@in_l2_groups
def lower_cube(
    work: CubeWork,
    configs: list[KernelConfig],
    target: Target,
    name: str,
    ops: tuple[str, ...],
    kind: str,
    signature: str,
) -> KernelBatch:
    """Lower a cube group under many tilings at once: the operand streams (with a
    prologue's), the bias and output streams, the vector epilogue and the buffers; configs
    run in L2 column groups on their groups' work (:func:`.cube_l2.in_l2_groups`)."""
    spec = target.spec
    n = len(configs)
    t = _Tiling.of(work, configs)
    streams, fed = _operand_streams(work, t, spec.l0_align_bytes)
    streams += _output_streams(work, t, fed)
    vec_cycles, syncs, epilogue = _epilogue(work, t, target, bool(fed))
    streams += epilogue
    pro = vector_cost(target, [(op, t.me * t.ke * r * work.out_item) for op, r in work.prologue])
    pro_cycles = pro.cycles / 2  # the tile's two vector cores share the prologue
    arr = t.arr
    mmads = ceil_div(t.me, arr["m"]) * ceil_div(t.ne, arr["n"]) * ceil_div(t.ke, arr["k"])
    cube = mmads * spec.mmad_fixed_cycles + t.me * t.ne * t.ke / 4096.0 / work.rate
    ci = work.cube_item
    return KernelBatch(
        name=name,
        ops=ops,
        kind=kind,
        unit="mixed" if work.mixed else "cube",
        configs=tuple(configs),
        grid=np.stack([np.full(n, work.batch, dtype=np.int64), t.gi, t.gj], axis=1),
        steps=t.steps,
        streams=tuple(streams),
        mte1_l0a_bytes=(t.me * t.ke * ci).astype(np.int64),
        mte1_l0b_bytes=(t.ke * t.ne * ci).astype(np.int64),
        mmads=mmads.astype(np.int64),
        cube_cycles=cube.astype(np.float64),
        vector_cycles_step=pro_cycles + np.zeros(n),
        vector_cycles_tile=vec_cycles,
        vector_instrs=np.zeros(n, dtype=np.int64),
        cross_core_syncs=syncs,
        footprint=_footprint(work, t, spec.ub_bytes),
        flops=work.flops,
        cube_flops=work.cube_flops,
        compulsory_bytes=work.compulsory,
        signature=signature,
    )


def _operand_streams(
    work: CubeWork, t: _Tiling, l0_align: int
) -> tuple[list[StreamBatch], set[str]]:
    """The A and B panels each step, and a prologue's source loads and operand stores.

    Returns:
        The streams, and the operands a prologue makes.
    """
    n = len(t.db)
    fed = {of for _, _, _, of in work.sources}
    # a prologue hands its operand to the cube through a per-core workspace (kernel.py), named
    # apart from the tensor so that a prologue result also read outside keeps a real store
    ws = {of: workspace(of, "operand") for of in fed}
    a_per_batch = work.a_bytes / (work.batch if work.a_batched else 1)
    # a row-major A block is base_m runs of base_k elements; a conv input runs along its rows
    a_run = t.ke if work.reuse == 1.0 and work.a_run == work.K else work.a_run
    b_per_batch = work.b_bytes / (work.batch if work.b_batched else 1)
    a_step = np.maximum(1, a_per_batch / work.reuse / (t.gi * t.steps))
    b_step = np.maximum(1, b_per_batch / (t.steps * t.gj))
    streams = [
        StreamBatch(
            ws.get(work.a, work.a),
            "MTE2",
            np.ceil(a_step).astype(np.int64),
            np.minimum(np.ceil(a_step), a_run * work.a_item).astype(np.int64),
            "bik" if work.a_batched else "ik",
            nd2nz=not (work.a_weight or work.conv or work.a in fed),
            tensor_bytes=work.a_bytes,
        ),
        StreamBatch(
            ws.get(work.b, work.b),
            "MTE2",
            np.ceil(b_step).astype(np.int64),
            (np.full(n, l0_align) if work.b_weight else t.ne * work.b_item).astype(np.int64),
            "bkj" if work.b_batched else "kj",
            nd2nz=not (work.b_weight or work.b in fed),
            tensor_bytes=work.b_bytes,
        ),
    ]
    # a prologue runs on the vector cores: they read its inputs and hand the operand block to
    # the cube through GM/L2 each step (read back by the operand stream above)
    keys = {
        work.a: ("bik" if work.a_batched else "ik", a_step, work.a_item),
        work.b: ("bkj" if work.b_batched else "kj", b_step, work.b_item),
    }
    for src, it, ratio, of in work.sources:
        key, step_bytes, of_item = keys[of]
        nbytes = np.maximum(it, np.ceil(step_bytes / of_item * it * ratio)).astype(np.int64)
        streams.append(
            StreamBatch(
                src,
                "MTE2",
                nbytes,
                np.minimum(nbytes, t.ke * it),
                key,
                side="vector",
                tensor_bytes=int(
                    (work.a_bytes if of == work.a else work.b_bytes) / of_item * it * ratio
                ),
            )
        )
    for of in fed:
        key, step_bytes, of_item = keys[of]
        nbytes = np.ceil(step_bytes).astype(np.int64)
        streams.append(
            StreamBatch(
                ws[of], "MTE3", nbytes, np.minimum(nbytes, t.ke * of_item), key, side="vector"
            )
        )
    return streams, fed


def _output_streams(work: CubeWork, t: _Tiling, fed: set[str]) -> list[StreamBatch]:
    """The bias loads and every output's store (on FixPipe, or from the vector side)."""
    streams = []
    for src, it in work.bias:
        streams.append(
            StreamBatch(
                src,
                "MTE2",
                (t.ne * it).astype(np.int64),
                (t.ne * it).astype(np.int64),
                "j",
                per="tile",
                tensor_bytes=work.N * it,
            )
        )
    out_tile = t.me * t.ne
    out_elems = work.batch * work.M * work.N
    blocks = work.batch * t.gi * t.gj * t.steps
    for dst, it, ratio, side in work.outputs:
        if dst in fed:
            # a prologue result also read outside: each (tile, step) writes its share of the
            # operand block it made (the tiles of a row or column all make the same block), so
            # the tensor is written once
            total = int(ratio * out_elems * it)
            nbytes = np.maximum(it, np.ceil(total / blocks)).astype(np.int64)
            streams.append(
                StreamBatch(
                    dst,
                    "MTE3",
                    nbytes,
                    np.minimum(nbytes, t.ke * it),
                    "bijk",
                    side="vector",
                    tensor_bytes=total,
                )
            )
            continue
        nbytes = np.maximum(it, out_tile * it * min(1.0, ratio)).astype(np.int64)
        streams.append(
            StreamBatch(
                dst,
                "FIX" if side == "cube" else "MTE3",
                nbytes,
                (t.ne * it).astype(np.int64),
                "bij",
                per="tile",
                side=side,
                tensor_bytes=int(ratio * out_elems * it),
            )
        )
    return streams


def _epilogue(
    work: CubeWork, t: _Tiling, target: Target, prologue: bool
) -> tuple[np.ndarray, np.ndarray, list[StreamBatch]]:
    """A vector epilogue's cycles per tile, the cross-core syncs, and its streams: the
    L0C -> UB crossing (through GM/L2 on a split chip, on FixPipe on a coupled one) and the
    epilogue's own inputs.

    Returns:
        (vector cycles per tile, syncs per tile, streams).
    """
    spec = target.spec
    n = len(t.db)
    vec_cycles = np.zeros(n)
    syncs = (t.steps if prologue else np.zeros(n)).astype(np.int64)  # a hand-off per step
    streams: list[StreamBatch] = []
    if not work.vec_ops:
        return vec_cycles, syncs, streams
    out_tile = t.me * t.ne
    out_elems = work.batch * work.M * work.N
    hand = (out_tile * work.out_item).astype(np.int64)
    if spec.is_split:
        for pipe, side in (("FIX", "cube"), ("MTE2", "vector")):
            streams.append(
                StreamBatch(
                    workspace(work.handoff, "fix"),
                    pipe,
                    hand,
                    (t.ne * work.out_item).astype(np.int64),
                    "bij",
                    per="tile",
                    side=side,
                    tensor_bytes=out_elems * work.out_item,
                )
            )
        syncs += 1
    else:  # coupled: L0C -> UB directly, on FixPipe
        vec_cycles = vec_cycles + hand / spec.fixpipe_bytes_per_cycle
    for src, it, ratio, key in work.vec_inputs:
        nbytes = (t.ne * it) if key == "j" else np.maximum(it, out_tile * it * min(1.0, ratio))
        streams.append(
            StreamBatch(
                src,
                "MTE2",
                nbytes.astype(np.int64),
                (t.ne * it).astype(np.int64),
                key,
                per="tile",
                side="vector",
                tensor_bytes=int(ratio * out_elems * it),
            )
        )
    touched = [(op, out_tile * r * work.out_item) for op, r in work.vec_ops]
    # two vector cores share a tile: each does half the rows
    vec_cycles = vec_cycles + vector_cost(target, touched).cycles / 2
    return vec_cycles, syncs, streams


def _footprint(work: CubeWork, t: _Tiling, ub_bytes: int) -> dict[str, np.ndarray]:
    """Bytes each buffer holds (L1, L0A/B/C; UB for a mixed kernel) per config."""
    arr, ci = t.arr, work.cube_item
    f = np.where(t.db, 2, 1)
    foot = {
        "l1": (arr["base_m"] * arr["base_k"] + arr["base_k"] * arr["base_n"]) * ci * f
        + arr["base_n"] * 4,
        "l0a": arr["m"] * arr["k"] * ci * f,
        "l0b": arr["k"] * arr["n"] * ci * f,
        "l0c": arr["base_m"] * arr["base_n"] * 4,
    }
    if work.mixed:
        foot["ub"] = np.array(
            [
                ub_need(work, int(a), int(b), int(k), bool(d), ub_bytes)
                for a, b, k, d in zip(
                    arr["base_m"], arr["base_n"], arr["base_k"], t.db, strict=True
                )
            ]
        )
    return foot
