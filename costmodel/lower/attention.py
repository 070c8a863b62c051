"""Lowering of fused attention (QK^T -> scale/mask -> softmax -> PV), flash-style.

A tile is one block of ``base_m`` query rows of one (batch, head); it walks the key sequence
in ``kv_tile`` steps. Each step loads a K and a V block (shared by every query block of that
head, so they come from L2 after the first), computes the scores on the cube, runs the online
softmax (running max and sum, rescaling the accumulator) on the vector cores, and the PV
product on the cube. On the split 910B the scores and probabilities cross between cube and
vector cores through GM/L2 each step; on a coupled chip scores go L0C -> UB directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodel.kernel import KernelBatch, KernelConfig, StreamBatch, workspace
from costmodel.lower.common import (
    ceil_div,
    ceil_to,
    inplace_writes,
    mem_itemsize,
    pow2_choices,
    vector_cost,
)
from costmodel.spec import Target
from search_space.ir import FusionGroup, Graph, Op, OpClass, alias_root

__all__ = ["AttentionWork", "analyse_attention", "attention_grid", "lower_attention"]


@dataclass(frozen=True)
class AttentionWork:
    bh: int
    S: int
    T: int
    D: int
    Dv: int
    q: str
    k: str
    v: str
    item: int  # activations in memory
    cube_item: int
    rate: float
    mask: tuple[tuple[str, int, int], ...]  # (tensor, item, numel)
    vec_ops: tuple[Op, ...]
    output: tuple[str, int]
    extra_outputs: tuple[tuple[str, int, int], ...]
    flops: int
    cube_flops: int
    compulsory: int
    kv_bytes: tuple[int, int]


def analyse_attention(graph: Graph, group: FusionGroup, target: Target) -> AttentionWork:
    """Find Q, K, V, masks and the softmax chain of an attention group."""
    members = [graph.op(n) for n in group.ops]
    cubes = [op for op in members if op.op_class is OpClass.CUBE and op.unit == "cube"]
    qk, pv = cubes[0], cubes[-1]
    scores = graph.tensors[qk.outputs[0]].static_shape
    out = graph.tensors[pv.outputs[0]].static_shape
    S, T = scores[-2], scores[-1]
    bh = max(1, math.prod(scores[:-2]))
    D = graph.tensors[qk.inputs[0]].static_shape[-1]
    Dv = out[-1]
    q, k, v = (alias_root(graph, t) for t in (qk.inputs[0], qk.inputs[1], pv.inputs[1]))
    item = mem_itemsize(graph, qk.inputs[0], target)
    produced = {t for op in members for t in op.outputs if t}
    qkv = {qk.inputs[0], qk.inputs[1], pv.inputs[1]}
    # a KV cache updated in place inside the group: its buffer is the K or V read, not an
    # extra input, and only the new rows are written back (common.InPlace)
    inplace = inplace_writes(graph, members)
    buffers = {w.buffer for w in inplace.values()}
    mask = tuple(
        (t, mem_itemsize(graph, t, target), graph.tensors[t].numel)
        for t in group.inputs
        if t not in produced
        and t not in qkv
        and t not in buffers
        and graph.tensors[t].numel > 16
        and alias_root(graph, t) not in (q, k, v)
    )
    vec_ops = tuple(op for op in members if op not in (qk, pv) and not op.is_view)
    main = pv.outputs[0] if pv.outputs[0] in group.outputs else group.outputs[-1]
    extra = tuple(
        (
            t,
            mem_itemsize(graph, t, target),
            graph.tensors[inplace[t].updates if t in inplace else t].numel,
        )
        for t in group.outputs
        if t != main
    )
    kv_bytes = (graph.tensors[k].numel * item, graph.tensors[v].numel * item)
    compulsory = graph.tensors[q].numel * item + sum(kv_bytes)
    compulsory += sum(n * it for _, it, n in mask) + graph.tensors[main].numel * item
    compulsory += sum(n * it for _, it, n in extra)
    return AttentionWork(
        bh=bh,
        S=S,
        T=T,
        D=D,
        Dv=Dv,
        q=q,
        k=k,
        v=v,
        item=item,
        cube_item=target.cube_itemsize(graph.tensors[q].itemsize),
        rate=target.cube_rate(graph.tensors[q].itemsize),
        mask=mask,
        vec_ops=vec_ops,
        output=(main, mem_itemsize(graph, main, target)),
        extra_outputs=extra,
        flops=sum(op.flops for op in members),
        cube_flops=sum(op.cube_flops for op in members),
        compulsory=int(compulsory),
        kv_bytes=kv_bytes,
    )


def _foot(w: AttentionWork, bm: np.ndarray, kv: np.ndarray, db: np.ndarray) -> dict[str, Any]:
    f = np.where(db, 2, 1)
    ci = w.cube_item
    return {
        "l1": (bm * w.D + kv * w.D + kv * w.Dv + bm * kv) * ci * f,
        "l0a": np.maximum(bm * min(w.D, 128), bm * np.minimum(kv, 128)) * ci * f,
        "l0b": np.maximum(np.minimum(kv, 128) * min(w.D, 128), 128 * min(w.Dv, 128)) * ci * f,
        "l0c": bm * np.maximum(kv, w.Dv) * 4,
        "ub": ((bm * kv * 4) * 2 + bm * w.Dv * 4) * f // 2 + bm * w.Dv * 4 // 2 + bm * 16,
    }


def attention_grid(work: AttentionWork, target: Target) -> list[KernelConfig]:
    spec = target.spec
    configs = []
    for db in (True, False):
        for bm in pow2_choices(work.S):
            for kv in pow2_choices(work.T, lo=64, hi=1024):
                foot = _foot(work, np.array([bm]), np.array([kv]), np.array([db]))
                if any(int(v[0]) > int(getattr(spec, f"{b}_bytes")) for b, v in foot.items()):
                    continue
                for bd in sorted({spec.cube_cores, max(1, spec.cube_cores // 2)}, reverse=True):
                    configs.append(
                        KernelConfig(
                            block_dim=bd,
                            base_m=bm,
                            base_n=work.Dv,
                            base_k=work.D,
                            m=min(bm, 128),
                            n=128,
                            k=128,
                            double_buffer=db,
                            knobs=(("kv_tile", kv),),
                        )
                    )
    return configs


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
    under many configs at once."""
    # Long by design: the flash-attention template's streams and cycles, one numpy array per
    # term, in kernel order (scores, softmax, PV, hand-offs).
    spec = target.spec
    n = len(configs)
    bm = np.array([c.base_m for c in configs], dtype=np.int64)
    kv = np.array([c.knob("kv_tile", 128) for c in configs], dtype=np.int64)
    db = np.array([c.double_buffer for c in configs], dtype=bool)
    gi = ceil_div(work.S, bm)
    steps = ceil_div(work.T, kv)
    me = np.minimum(bm, ceil_to(ceil_div(work.S, gi), 16))
    ke = np.minimum(kv, ceil_to(ceil_div(work.T, steps), 16))
    D16, Dv16 = int(ceil_to(work.D, 16)), int(ceil_to(work.Dv, 16))
    it, ci = work.item, work.cube_item
    i64 = np.int64
    streams = [
        StreamBatch(
            work.q,
            "MTE2",
            (me * work.D * it).astype(i64),
            np.full(n, work.D * it),
            "bi",
            per="tile",
            nd2nz=True,
            tensor_bytes=work.bh * work.S * work.D * it,
        ),
        StreamBatch(
            work.k,
            "MTE2",
            np.ceil(work.kv_bytes[0] / (work.bh * steps)).astype(i64),
            np.full(n, work.D * it),
            "bk",
            nd2nz=True,
            tensor_bytes=work.kv_bytes[0],
        ),
        StreamBatch(
            work.v,
            "MTE2",
            np.ceil(work.kv_bytes[1] / (work.bh * steps)).astype(i64),
            np.full(n, work.Dv * it),
            "bk",
            nd2nz=True,
            tensor_bytes=work.kv_bytes[1],
        ),
    ]
    full = work.bh * work.S * work.T
    for t, mit, numel in work.mask:
        key = "bik" if numel >= full else "ik"
        per_head = numel if numel < full else numel / work.bh
        nbytes = np.maximum(mit, me * ke * mit * min(1.0, per_head / (work.S * work.T)))
        streams.append(
            StreamBatch(
                t,
                "MTE2",
                np.ceil(nbytes).astype(i64),
                (ke * mit).astype(i64),
                key,
                side="vector",
                tensor_bytes=numel * mit,
            )
        )
    syncs = np.zeros(n, dtype=i64)
    if spec.is_split:  # scores and probabilities cross cores through GM/L2 every step
        ws_s, ws_p = workspace(name, "scores"), workspace(name, "probs")
        s_bytes = (me * ke * 4).astype(i64)
        p_bytes = (me * ke * ci).astype(i64)
        o_bytes = (me * Dv16 * 4).astype(i64)
        ws = [
            (ws_s, "FIX", s_bytes, "cube"),
            (ws_s, "MTE2", s_bytes, "vector"),
            (ws_p, "MTE3", p_bytes, "vector"),
            (ws_p, "MTE2", p_bytes, "cube"),
            (workspace(name, "pv"), "FIX", o_bytes, "cube"),
            (workspace(name, "pv"), "MTE2", o_bytes, "vector"),
        ]
        for t, pipe, nbytes, side in ws:
            streams.append(
                StreamBatch(
                    t,
                    pipe,
                    nbytes,
                    (ke * 4).astype(i64),
                    "bik",
                    side=side,
                    tensor_bytes=int(nbytes.max()) * spec.cube_cores,
                )
            )
        syncs = 2 * steps
    main, oit = work.output
    streams.append(
        StreamBatch(
            main,
            "MTE3",
            (me * work.Dv * oit).astype(i64),
            np.full(n, work.Dv * oit),
            "bi",
            per="tile",
            side="vector",
            tensor_bytes=work.bh * work.S * work.Dv * oit,
        )
    )
    for t, xit, numel in work.extra_outputs:  # an intermediate also needed outside the group
        nbytes = np.ceil(numel * xit / (work.bh * gi * steps)).astype(i64)
        streams.append(
            StreamBatch(
                t,
                "MTE3",
                nbytes,
                (ke * xit).astype(i64),
                "bik",
                side="vector",
                tensor_bytes=numel * xit,
            )
        )
    mmads = ceil_div(me, 128) * (
        ceil_div(ke, 128) * ceil_div(D16, 128) + ceil_div(Dv16, 128) * ceil_div(ke, 128)
    )
    cube = mmads * spec.mmad_fixed_cycles + me * ke * (D16 + Dv16) / 4096.0 / work.rate
    score_bytes = me * ke * 4.0
    touched = [(op, score_bytes) for op in work.vec_ops]
    vc = (
        vector_cost(target, touched).cycles
        + vector_cost(target, [(work.vec_ops[0], me * Dv16 * 4.0)]).cycles
        if work.vec_ops
        else np.zeros(n)
    )
    foot = _foot(work, bm, kv, db)
    return KernelBatch(
        name=name,
        ops=ops,
        kind=kind,
        unit="mixed",
        configs=tuple(configs),
        grid=np.stack([np.full(n, work.bh, dtype=i64), gi, np.ones(n, dtype=i64)], axis=1),
        steps=steps.astype(i64),
        streams=tuple(streams),
        mte1_l0a_bytes=(me * (D16 + ke) * ci).astype(i64),
        mte1_l0b_bytes=(ke * (D16 + Dv16) * ci).astype(i64),
        mmads=mmads.astype(i64),
        cube_cycles=cube.astype(np.float64),
        vector_cycles_step=(vc / 2) + np.zeros(n),
        vector_cycles_tile=(me * Dv16 * 4.0 / spec.vector_bytes_per_cycle) + np.zeros(n),
        vector_instrs=np.zeros(n, dtype=i64),
        cross_core_syncs=syncs.astype(i64),
        footprint={k: np.asarray(v, dtype=i64) for k, v in foot.items()},
        flops=work.flops,
        cube_flops=work.cube_flops,
        compulsory_bytes=work.compulsory,
        signature=signature,
    )
