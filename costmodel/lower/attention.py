"""Lowering of fused attention (QK^T -> scale/mask -> softmax -> PV), flash-style.

A tile is one block of ``base_m`` query rows of one (batch, head); it walks the key sequence
in ``kv_tile`` steps. Each step loads a K and a V block (shared by every query block of that
head, so they come from L2 after the first), computes the scores on the cube, runs the online
softmax (running max and sum, rescaling the accumulator) on the vector cores, and the PV
product on the cube. On the split 910B the scores and probabilities cross between cube and
vector cores through GM/L2 each step; on a coupled chip scores go L0C -> UB directly.

Grouped-query attention with its K/V broadcast inside the group reads each KV head once, its
query heads folded into M (:mod:`.attention_work`). With ``kv_split`` > 1 (flash-decoding)
the keys are cut into that many contiguous parts, one tile each (grid axis J); each part
stores its output and log-sum-exp to an L2 workspace and, after an all-core sync, the tiles
combine them, each 1/J of its rows from all J parts.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from costmodel.kernel import KernelBatch, KernelConfig, StreamBatch, workspace
from costmodel.lower.attention_vector import VEC_ROWS, slice_rows, softmax_cycles
from costmodel.lower.attention_work import AttentionWork, analyse_attention
from costmodel.lower.common import ceil_div, ceil_to, kv_ranges, pow2_choices
from costmodel.spec import Target

# 0: the kernel computes the key blocks a causal mask hides too, and masks them (CANN's
# fused-infer-attention under sparse_mode 0); the search grid always skips them (absent: 1)
CAUSAL_SKIP = "causal_skip"

__all__ = [
    "CAUSAL_SKIP",
    "VEC_ROWS",
    "AttentionWork",
    "analyse_attention",
    "at_query_block",
    "attention_default",
    "attention_grid",
    "lower_attention",
]


def at_query_block(config: KernelConfig, bm: int, knobs: dict[str, int]) -> KernelConfig:
    """``config`` at ``bm`` query rows per block (the cube takes them 128 at a time) with
    ``knobs`` set: a config the grid may not hold (a hand-written kernel's tiles)."""
    merged = tuple({**dict(config.knobs), **knobs}.items())
    return dataclasses.replace(config, base_m=bm, m=_l0_rows(bm), knobs=merged)


def _l0_rows(bm: int) -> int:
    """Query rows of a block the cube's L0A takes at a time."""
    return min(bm, 128)


def _foot(
    w: AttentionWork, bm: np.ndarray, kv: np.ndarray, db: np.ndarray, rows: np.ndarray
) -> dict[str, Any]:
    f = np.where(db, 2, 1)
    ci = w.cube_item
    return {
        "l1": (bm * w.D + kv * w.D + kv * w.Dv + bm * kv) * ci * f,
        "l0a": np.maximum(bm * min(w.D, 128), bm * np.minimum(kv, 128)) * ci * f,
        "l0b": np.maximum(np.minimum(kv, 128) * min(w.D, 128), 128 * min(w.Dv, 128)) * ci * f,
        "l0c": bm * np.maximum(kv, w.Dv) * 4,
        # per AIV (each takes half the block's rows), for the ``rows`` it holds at a time:
        # the fp32 scores, the probabilities in the cube's type, the step's PV product;
        # for all its rows: the running output, max and sum
        "ub": (rows * kv * (4 + ci) + rows * w.Dv * 4) * f + bm * w.Dv * 4 // 2 + bm * 16,
    }


def _tiles(work: AttentionWork, config: KernelConfig) -> int:
    """Tiles of a config: (batch x head) blocks x query blocks x key parts."""
    return _blocks(work, config.base_m) * config.knob("kv_split", 1)


def _blocks(work: AttentionWork, bm: int) -> int:
    return work.bh * int(ceil_div(work.S, bm))


def _splits(work: AttentionWork, bm: int, kv: int, cores: tuple[int, ...]) -> list[int]:
    """``kv_split`` choices: none, and, while the tiles leave cores idle, the powers of two
    and the splits that fill each block dim, up to two tiles per core; each a real split."""
    tiles = _blocks(work, bm)
    if tiles >= max(cores):
        return [1]
    top = 2 * max(cores)
    wanted = {1 << i for i in range(1, 6)} | {int(ceil_div(c, tiles)) for c in cores}
    real = (s for s in wanted if 1 < s and tiles * s <= top and len(kv_ranges(work.T, s, kv)) == s)
    return [1, *sorted(real)]


def attention_grid(work: AttentionWork, target: Target) -> list[KernelConfig]:
    spec = target.spec
    configs = []
    dims = tuple(sorted({spec.cube_cores, max(1, spec.cube_cores // 2)}, reverse=True))
    for db in (True, False):
        for bm in pow2_choices(work.S):
            for kv in pow2_choices(work.T, lo=64, hi=1024):
                one = np.array([bm])
                foot = _foot(work, one, np.array([kv]), np.array([db]), slice_rows(one))
                if any(int(v[0]) > int(getattr(spec, f"{b}_bytes")) for b, v in foot.items()):
                    continue
                for split in _splits(work, bm, kv, dims):
                    knobs = (("kv_split", split),) if split > 1 else ()
                    for bd in dims:
                        configs.append(
                            KernelConfig(
                                block_dim=bd,
                                base_m=bm,
                                base_n=work.Dv,
                                base_k=work.D,
                                m=_l0_rows(bm),
                                n=128,
                                k=128,
                                double_buffer=db,
                                knobs=(*knobs, ("kv_tile", kv)),
                            )
                        )
    return configs


def attention_default(work: AttentionWork, pool: list[KernelConfig], cores: int) -> KernelConfig:
    """The largest tiles, unsplit, when their blocks give every core a tile; else the split
    over the keys (flash-decoding) with the fewest tiles that does, at its largest tiles, as
    CANN's incremental flash attention splits the keys for decoding; else the most tiles."""

    tiles = functools.partial(_tiles, work)

    def size(c: KernelConfig) -> tuple[int, int]:
        return (c.base_m * c.knob("kv_tile"), c.knob("kv_tile"))

    largest = max((c for c in pool if c.knob("kv_split", 1) == 1), key=size)
    if tiles(largest) >= cores:
        return largest
    filling = [c for c in pool if tiles(c) >= cores]
    if filling:
        return min(filling, key=lambda c: (tiles(c), tuple(-x for x in size(c))))
    return max(pool, key=lambda c: (tiles(c), size(c)))


def _causal_steps(
    work: AttentionWork,
    bm: np.ndarray,
    kv: np.ndarray,
    gj: np.ndarray,
    part: np.ndarray,
    steps: np.ndarray,
    skip: np.ndarray,
) -> np.ndarray:
    """The key steps a tile runs: all of its part's under no mask, or where the config
    does not ``skip`` masked blocks; under a causal mask (``work.causal``) the mean over its
    tiles of the blocks up to each query block's last visible key, rounded up (a tile of
    keys all masked for its queries is skipped)."""
    if work.causal is None:
        return steps
    pos = work.positions
    out = np.empty_like(steps)
    for n, (m, k, j, width, full) in enumerate(zip(bm, kv, gj, part, steps, strict=True)):
        ends = [
            min(work.T, int(pos[a : a + m].max()) + 1 + work.causal)
            for a in range(0, work.S, int(m))
        ]
        runs = [min(full, max(0, -(-(end - p * width) // k))) for end in ends for p in range(j)]
        out[n] = max(1, -(-sum(runs) // len(runs)))
    return np.where(skip, out, steps)


@dataclasses.dataclass(frozen=True)
class _Tiling:
    """An attention group's tiling under each config (one array entry per config): query
    rows per tile (``bm``, ``me`` in effect), keys per step (``kv``, ``ke`` in effect), the
    grid (``gi`` query blocks by ``gj`` key parts), steps per tile (``steps``; ``run`` of
    them run under a causal mask), double buffering, rows a vector core softmaxes at a
    time, and the head dims padded to the cube's 16."""

    n: int
    bm: np.ndarray
    kv: np.ndarray
    db: np.ndarray
    gi: np.ndarray
    gj: np.ndarray
    steps: np.ndarray
    run: np.ndarray
    me: np.ndarray
    ke: np.ndarray
    rows: np.ndarray
    D16: int
    Dv16: int

    @property
    def split(self) -> np.ndarray:
        """Flash-decoding: the keys split in parts whose outputs are combined."""
        return self.gj > 1


def _tiling(work: AttentionWork, configs: list[KernelConfig]) -> _Tiling:
    bm = np.array([c.base_m for c in configs], dtype=np.int64)
    kv = np.array([c.knob("kv_tile", 128) for c in configs], dtype=np.int64)
    gj = np.array(
        [len(kv_ranges(work.T, c.knob("kv_split", 1), c.knob("kv_tile", 128))) for c in configs]
    )
    gi = ceil_div(work.S, bm)
    part = ceil_div(work.T, gj)  # keys per tile
    steps = ceil_div(part, kv)
    skip = np.array([c.knob(CAUSAL_SKIP, 1) for c in configs], dtype=bool)
    return _Tiling(
        n=len(configs),
        bm=bm,
        kv=kv,
        db=np.array([c.double_buffer for c in configs], dtype=bool),
        gi=gi,
        gj=gj,
        steps=steps,
        run=_causal_steps(work, bm, kv, gj, part, steps, skip),  # the steps a tile runs
        me=np.minimum(bm, ceil_to(ceil_div(work.S, gi), 16)),
        ke=np.minimum(kv, ceil_to(ceil_div(part, steps), 16)),
        rows=slice_rows(bm, np.array([c.knob(VEC_ROWS, 0) for c in configs], dtype=np.int64)),
        D16=int(ceil_to(work.D, 16)),
        Dv16=int(ceil_to(work.Dv, 16)),
    )


def _operands(work: AttentionWork, t: _Tiling) -> list[StreamBatch]:
    """Q once a tile, K and V a block a step. They move row by row (ND->NZ); where their rows
    lie back to back (packed), HBM fetches only the bytes of a block, not its whole bursts."""
    it, n, i64 = work.item, t.n, np.int64
    per_step = work.bh * t.gj * t.steps
    return [
        StreamBatch(
            work.q,
            "MTE2",
            (t.me * work.D * it).astype(i64),
            np.full(n, work.D * it),
            "bi",
            per="tile",
            nd2nz=True,
            tensor_bytes=work.bh * work.S * work.D * it,
            packed=work.packed[0],
        ),
        StreamBatch(
            work.k,
            "MTE2",
            np.ceil(work.kv_bytes[0] / per_step).astype(i64),
            np.full(n, work.D * it),
            "bjk",
            nd2nz=True,
            tensor_bytes=work.kv_bytes[0],
            packed=work.packed[1],
        ),
        StreamBatch(
            work.v,
            "MTE2",
            np.ceil(work.kv_bytes[1] / per_step).astype(i64),
            np.full(n, work.Dv * it),
            "bjk",
            nd2nz=True,
            tensor_bytes=work.kv_bytes[1],
            packed=work.packed[2],
        ),
    ]


def _vector_inputs(work: AttentionWork, t: _Tiling) -> list[StreamBatch]:
    """What the softmax side reads: a mask block a step (per head, or shared by the heads),
    and side inputs (a rotary table, a cache's new rows) once a tile."""
    i64, out = np.int64, []
    full = work.bh * work.S * work.T
    for name, mit, numel in work.mask:
        key = "bijk" if numel >= full else "ijk"
        per_head = numel if numel < full else numel / work.bh
        nbytes = np.maximum(mit, t.me * t.ke * mit * min(1.0, per_head / (work.S * work.T)))
        out.append(
            StreamBatch(
                name,
                "MTE2",
                np.ceil(nbytes).astype(i64),
                (t.ke * mit).astype(i64),
                key,
                side="vector",
                tensor_bytes=numel * mit,
            )
        )
    for name, sit, numel in work.side_inputs:
        out.append(
            StreamBatch(
                name,
                "MTE2",
                np.ceil(numel * sit / (work.bh * t.gi * t.gj)).astype(i64),
                np.full(t.n, min(numel, work.D) * sit),
                "bij",
                per="tile",
                side="vector",
                tensor_bytes=numel * sit,
            )
        )
    return out


def _crossings(name: str, work: AttentionWork, target: Target, t: _Tiling) -> list[StreamBatch]:
    """On a split chip, scores, probabilities and the PV product cross between the cube and
    the vector cores through GM/L2 every step."""
    spec, i64 = target.spec, np.int64
    ws_s, ws_p, ws_o = (workspace(name, w) for w in ("scores", "probs", "pv"))
    s_bytes = (t.me * t.ke * 4).astype(i64)
    p_bytes = (t.me * t.ke * work.cube_item).astype(i64)
    o_bytes = (t.me * t.Dv16 * 4).astype(i64)
    moves = [
        (ws_s, "FIX", s_bytes, "cube"),
        (ws_s, "MTE2", s_bytes, "vector"),
        (ws_p, "MTE3", p_bytes, "vector"),
        (ws_p, "MTE2", p_bytes, "cube"),
        (ws_o, "FIX", o_bytes, "cube"),
        (ws_o, "MTE2", o_bytes, "vector"),
    ]
    return [
        StreamBatch(
            ws,
            pipe,
            nbytes,
            (t.ke * 4).astype(i64),
            "bijk",
            side=side,
            tensor_bytes=int(nbytes.max()) * spec.cube_cores,
        )
        for ws, pipe, nbytes, side in moves
    ]


def _partials(name: str, work: AttentionWork, t: _Tiling) -> list[StreamBatch]:
    """Flash-decoding: each part's output and log-sum-exp (fp32) through L2, read back by
    the combining pass (a tile combines 1/J of its rows from all J parts)."""
    partial = workspace(name, "parts")
    p_bytes = np.where(t.split, t.me * (t.Dv16 + 8) * 4, 0).astype(np.int64)
    return [
        StreamBatch(
            partial,
            pipe,
            p_bytes,
            np.full(t.n, (t.Dv16 + 8) * 4),
            "bij",
            per="tile",
            side="vector",
            tensor_bytes=int((p_bytes * t.gi * t.gj).max()) * work.bh,
        )
        for pipe in ("MTE3", "MTE2")
    ]


def _outputs(work: AttentionWork, t: _Tiling) -> list[StreamBatch]:
    """The output once a tile (a part's share of it under a split), and an intermediate also
    needed outside the group, written whole over the steps the tiles run (all of them, under
    a causal mask too)."""
    i64 = np.int64
    main, oit = work.output
    out = [
        StreamBatch(
            main,
            "MTE3",
            np.ceil(t.me * work.Dv * oit / t.gj).astype(i64),
            np.full(t.n, work.Dv * oit),
            "bij",
            per="tile",
            side="vector",
            tensor_bytes=work.bh * work.S * work.Dv * oit,
        )
    ]
    for name, xit, numel in work.extra_outputs:
        out.append(
            StreamBatch(
                name,
                "MTE3",
                np.ceil(numel * xit / (work.bh * t.gi * t.gj * t.run)).astype(i64),
                (t.ke * xit).astype(i64),
                "bijk",
                side="vector",
                tensor_bytes=numel * xit,
            )
        )
    return out


def lower_attention(
    work: AttentionWork,
    configs: list[KernelConfig],
    target: Target,
    name: str,
    ops: tuple[str, ...],
    kind: str,
    signature: str,
) -> KernelBatch:
    """Lower an attention group (flash attention: QK^T, online softmax, PV per KV tile)
    under many configs at once: its tiling, its streams in kernel order (operands, the
    softmax side's inputs, a split chip's crossings, flash-decoding's partials, outputs),
    then its cycles."""
    spec, t, i64 = target.spec, _tiling(work, configs), np.int64
    streams = _operands(work, t) + _vector_inputs(work, t)
    syncs = np.zeros(t.n, dtype=i64)
    if spec.is_split:
        streams += _crossings(name, work, target, t)
        syncs = 2 * t.run
    if t.split.any():
        streams += _partials(name, work, t)
    streams += _outputs(work, t)
    D16, Dv16, me, ke = t.D16, t.Dv16, t.me, t.ke
    mmads = ceil_div(me, 128) * (
        ceil_div(ke, 128) * ceil_div(D16, 128) + ceil_div(Dv16, 128) * ceil_div(ke, 128)
    )
    cube = mmads * spec.mmad_fixed_cycles + me * ke * (D16 + Dv16) / 4096.0 / work.rate
    share = work.visible_share  # of the score matrix: the work done
    return KernelBatch(
        name=name,
        ops=ops,
        kind=kind,
        unit="mixed",
        configs=tuple(configs),
        grid=np.stack([np.full(t.n, work.bh, dtype=i64), t.gi, t.gj.astype(i64)], axis=1),
        steps=t.run.astype(i64),
        streams=tuple(streams),
        mte1_l0a_bytes=(me * (D16 + ke) * work.cube_item).astype(i64),
        mte1_l0b_bytes=(ke * (D16 + Dv16) * work.cube_item).astype(i64),
        mmads=mmads.astype(i64),
        cube_cycles=cube.astype(np.float64),
        vector_cycles_step=softmax_cycles(target, work, me, ke, t.rows, Dv16) + np.zeros(t.n),
        # normalise the output; a split's combining pass also weighs and sums J parts' rows
        vector_cycles_tile=me * Dv16 * 4.0 * np.where(t.split, 3, 1) / spec.vector_bytes_per_cycle,
        vector_instrs=np.zeros(t.n, dtype=i64),
        cross_core_syncs=(syncs + t.split).astype(i64),  # a split waits for all parts
        footprint={
            k: np.asarray(v, dtype=i64) for k, v in _foot(work, t.bm, t.kv, t.db, t.rows).items()
        },
        flops=int(work.flops * share),
        cube_flops=int(work.cube_flops * share),
        compulsory_bytes=work.compulsory,
        signature=signature,
    )
