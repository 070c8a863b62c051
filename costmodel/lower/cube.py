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

import math
from dataclasses import dataclass

import numpy as np

from costmodel.kernel import KernelBatch, KernelConfig, StreamBatch, workspace
from costmodel.lower.common import (
    ceil_div,
    ceil_to,
    is_compile_time,
    mem_itemsize,
    pow2_choices,
    vector_cost,
)
from costmodel.spec import Target
from search_space.ir import FusionGroup, Graph, Op, OpClass, alias_root

__all__ = ["CubeWork", "analyse_cube", "cube_grid", "lower_cube"]

FIXPIPE_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Relu",
        "LeakyRelu",
        "Clip",
        "PRelu",
        "Cast",
        "BatchNormalization",
        "QuantizeLinear",
        "DequantizeLinear",
    }
)
SCALAR_MAX = 16
C0 = 16  # channels per fractal slice of the 5HD activation layout


@dataclass(frozen=True)
class CubeWork:
    batch: int
    M: int
    N: int
    K: int
    a: str
    a_item: int
    a_weight: bool
    a_batched: bool
    a_bytes: int
    a_run: int
    reuse: float
    conv: bool
    b: str
    b_item: int
    b_weight: bool
    b_batched: bool
    b_bytes: int
    cube_item: int
    rate: float
    bias: tuple[tuple[str, int], ...]  # FixPipe per-channel inputs (tensor, bytes per channel)
    vec_ops: tuple[tuple[Op, float], ...]  # vector epilogue ops, elements per output element
    vec_inputs: tuple[tuple[str, int, float, str], ...]  # (tensor, item, ratio, key)
    prologue: tuple[tuple[Op, float], ...]
    sources: tuple[tuple[str, int, float, str], ...]  # prologue inputs: (tensor, item, ratio, of)
    outputs: tuple[tuple[str, int, float, str], ...]  # (tensor, item, ratio, side)
    handoff: str  # tensor crossing L0C -> vector in a mixed kernel ("" if none)
    out_item: int
    full_row: bool
    flops: int
    cube_flops: int
    compulsory: int

    @property
    def mixed(self) -> bool:
        """Whether the vector cores take part: an epilogue, or a prologue computing an
        operand (on a split chip only the AIVs can run vector code)."""
        return bool(self.vec_ops or self.sources)


def _dims(graph: Graph, anchor: Op) -> tuple[int, int, int, int, float, int]:
    """(batch, M, N, K, window reuse, A's contiguous run in elements) of a cube op."""
    sh = [graph.tensors[t].static_shape if t else () for t in anchor.inputs]
    out = graph.tensors[anchor.outputs[0]].static_shape
    if anchor.op_type.startswith(("Conv", "QLinearConv")):
        x, w = (sh[0], sh[3]) if anchor.op_type == "QLinearConv" else (sh[0], sh[1])
        group = int(anchor.attr("group", 1))
        kernel = math.prod(w[2:]) or 1
        strides = anchor.attr("strides") or (1,) * (len(w) - 2)
        if anchor.op_type.startswith("ConvTranspose"):
            M, N, K = x[0] * math.prod(x[2:]), w[1] * kernel, w[0] // group
            return group, M, N, K, 1.0, int(math.prod(x[2:]) * C0)
        M, N, K = out[0] * math.prod(out[2:]), w[0] // group, w[1] * kernel
        reuse = min(float(kernel), max(1.0, kernel / max(1, math.prod(strides))))
        # activations between convolutions live in NC1HWC0 (5HD): a C0 slice of the whole
        # feature map is one contiguous run, and img2col loads it without an ND->NZ pass
        return group, M, N, K, reuse, int(math.prod(x[2:]) * C0)
    a, b = sh[0], sh[1]
    if anchor.op_type == "Gemm":
        M, K = (a[1], a[0]) if anchor.attr("transA", 0) else (a[0], a[1])
        N = b[0] if anchor.attr("transB", 0) else b[1]
        return 1, M, N, K, 1.0, int(a[-1])
    M = a[-2] if len(a) >= 2 else 1
    K = a[-1]
    N = b[-1] if len(b) >= 2 else 1
    batch = max(1, math.prod(out) // max(1, M * N))
    return batch, M, N, K, 1.0, int(K)


def _operands(anchor: Op) -> tuple[str, str]:
    if anchor.op_type == "QLinearConv" or anchor.op_type == "QLinearMatMul":
        return anchor.inputs[0], anchor.inputs[3]
    return anchor.inputs[0], anchor.inputs[1]


def analyse_cube(graph: Graph, group: FusionGroup, target: Target) -> CubeWork:
    """Describe a cube group: the anchor matmul, its FixPipe chain and vector epilogue."""
    members = [graph.op(n) for n in group.ops]
    anchors = [op for op in members if op.op_class is OpClass.CUBE and op.unit == "cube"]
    anchor = anchors[0]
    batch, M, N, K, reuse, run = _dims(graph, anchor)
    a, b = _operands(anchor)
    if len(anchors) > 1:  # horizontal: siblings on the same A computed as one wider matmul
        N = sum(_dims(graph, op)[2] for op in anchors)
    b_names = [_operands(op)[1] for op in anchors]
    act_item = mem_itemsize(graph, anchor.outputs[0], target)
    cube_item = target.cube_itemsize(graph.tensors[alias_root(graph, a)].itemsize)
    a_item = mem_itemsize(graph, a, target, cube_operand=True)
    b_item = mem_itemsize(graph, b, target, cube_operand=True)
    a_root, b_root = alias_root(graph, a), alias_root(graph, b)
    a_shape = graph.tensors[a_root].static_shape
    b_shape = graph.tensors[b_root].static_shape
    out_elems = batch * M * N
    anchor_outs = {t for op in anchors for t in op.outputs if t}

    # FixPipe chain: single-consumer per-channel ops right after each anchor
    fix: list[Op] = []
    bias: list[tuple[str, int]] = []
    names = set(group.ops)
    frontier = set(anchor_outs)
    for op in members:
        if op in anchors or op.is_view:
            if op.is_view and op.inputs and op.inputs[0] in frontier:
                frontier.add(op.outputs[0])
            continue
        data = [t for t in op.inputs if t in frontier]
        others = [t for t in op.inputs if t and t not in frontier]
        per_channel = all(
            is_compile_time(graph, t) and graph.tensors[t].numel in (*range(SCALAR_MAX + 1), N)
            for t in others
        )
        if (
            op.op_type in FIXPIPE_OPS
            and data
            and per_channel
            and not _after_activation(fix, op)
            and all(c.name in names for t in data for c in graph.consumers(t))
            and len(graph.consumers(data[0])) == 1
        ):
            fix.append(op)
            frontier.update(t for t in op.outputs if t)
            bias += [
                (t, mem_itemsize(graph, t, target))
                for t in others
                if graph.tensors[t].numel > SCALAR_MAX
            ]
        else:
            break
    fixed = {op.name for op in fix} | {op.name for op in anchors}
    before = {op.name for op in members[: members.index(anchor)]}
    prologue = tuple(
        (op, graph.tensors[op.outputs[0]].numel / max(1, graph.tensors[a_root].numel))
        for op in members
        if op.name in before and not op.is_view and op not in anchors
    )
    sources = tuple(
        (
            t,
            mem_itemsize(graph, t, target),
            graph.tensors[alias_root(graph, t)].numel / max(1, graph.tensors[root].numel),
            root,
        )
        for root in (a_root, b_root)
        for t in _sources(graph, members, root)
    )
    vec = [
        op for op in members if op.name not in fixed and op.name not in before and not op.is_view
    ]
    produced = {t for op in members for t in op.outputs if t}
    vec_inputs = []
    for t in dict.fromkeys(t for op in vec for t in op.inputs if t and t not in produced):
        numel = graph.tensors[alias_root(graph, t)].numel
        if numel <= SCALAR_MAX:
            continue
        key = "j" if numel == N else "bij"
        vec_inputs.append((t, mem_itemsize(graph, t, target), numel / out_elems, key))
    vec_ops = tuple(
        (op, max(graph.tensors[t].numel for t in (*op.inputs, *op.outputs) if t) / out_elems)
        for op in vec
    )
    vec_outs = {t for op in vec for t in op.outputs if t}
    outputs = tuple(
        (
            t,
            mem_itemsize(graph, t, target),
            graph.tensors[t].numel / out_elems,
            "vector" if t in vec_outs else "cube",
        )
        for t in group.outputs
    )
    handoff = ""
    if vec:
        order = [t for op in members for t in op.outputs if t in frontier]
        crossing = [t for t in order if any(c in vec for c in graph.consumers(t))]
        handoff = crossing[0] if crossing else anchor.outputs[0]
    full_row = any(op.op_class is OpClass.REDUCE for op in vec)
    a_bytes = graph.tensors[a_root].numel * a_item
    b_bytes = sum(graph.tensors[alias_root(graph, t)].numel for t in b_names) * b_item
    conv = anchor.op_type in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv")
    fed = {of for _, _, _, of in sources}
    compulsory = sum(graph.tensors[t].numel * it for t, it, _, _ in sources)
    compulsory += (0 if a_root in fed else a_bytes) + (0 if b_root in fed else b_bytes)
    compulsory += sum(graph.tensors[t].numel * it for t, it in bias)
    compulsory += sum(int(graph.tensors[t].numel * it) for t, it, _, _ in vec_inputs)
    compulsory += sum(int(graph.tensors[t].numel * it) for t, it, _, _ in outputs)
    return CubeWork(
        batch=batch,
        M=M,
        N=N,
        K=K,
        a=a_root,
        a_item=a_item,
        a_weight=is_compile_time(graph, a),
        a_batched=batch > 1 if conv else len(a_shape) > 2 and math.prod(a_shape[:-2]) > 1,
        a_bytes=a_bytes,
        a_run=run,
        reuse=reuse,
        conv=conv,
        b=b_root,
        b_item=b_item,
        b_weight=is_compile_time(graph, b),
        b_batched=batch > 1 if conv else len(b_shape) > 2 and math.prod(b_shape[:-2]) > 1,
        b_bytes=b_bytes,
        cube_item=cube_item,
        rate=target.cube_rate(graph.tensors[a_root].itemsize),
        bias=tuple(bias),
        vec_ops=vec_ops,
        vec_inputs=tuple(vec_inputs),
        prologue=prologue,
        sources=sources,
        outputs=outputs,
        handoff=handoff,
        out_item=act_item,
        full_row=full_row,
        flops=sum(op.flops for op in members),
        cube_flops=sum(op.cube_flops for op in members),
        compulsory=int(compulsory),
    )


def _sources(graph: Graph, members: list[Op], operand: str) -> list[str]:
    """External tensors a prologue computes ``operand`` from ([] when it is read directly)."""
    names = {op.name for op in members}
    producer = graph.producer(operand)
    if producer is None or producer.name not in names:
        return []
    found: dict[str, None] = {}
    todo, seen = [producer], {producer.name}
    while todo:
        op = todo.pop()
        for t in op.inputs:
            if not t:
                continue
            src = graph.producer(t)
            if src is not None and src.name in names:
                if src.name not in seen:
                    seen.add(src.name)
                    todo.append(src)
            elif graph.tensors[alias_root(graph, t)].numel > SCALAR_MAX:
                found.setdefault(alias_root(graph, t))
    return list(found)


def _after_activation(fix: list[Op], op: Op) -> bool:
    """FixPipe stages run in order (bias, quant, activation): nothing after an activation."""
    return any(f.op_type in ("Relu", "LeakyRelu", "Clip", "PRelu") for f in fix) and (
        op.op_type in ("Add", "Sub", "Mul", "BatchNormalization")
    )


def _l0_tile(bm: int, bn: int, bk: int, item: int, db: bool, target: Target) -> tuple[int, ...]:
    spec, f = target.spec, (2 if db else 1)
    best: tuple[int, ...] = (16, 16, 16)
    for m in pow2_choices(bm, hi=bm if bm & (bm - 1) == 0 else 512):
        for n in pow2_choices(bn, hi=max(16, 1 << (bn.bit_length() - 1))):
            for k in pow2_choices(bk, hi=max(16, 1 << (bk.bit_length() - 1))):
                if m > bm or n > bn or k > bk:
                    continue
                if m * k * item * f > spec.l0a_bytes or k * n * item * f > spec.l0b_bytes:
                    continue
                if (m * n * k, k) > (best[0] * best[1] * best[2], best[2]):
                    best = (m, n, k)
    return best


def cube_grid(work: CubeWork, target: Target) -> list[KernelConfig]:
    """Feasible two-level tilings (L1 block, L0 tile), both buffering modes, all/half cores."""
    spec = target.spec
    ci = work.cube_item
    bms = pow2_choices(work.M)
    bns = pow2_choices(work.N)
    bks = pow2_choices(work.K, lo=32)
    cores = sorted({spec.cube_cores, max(1, spec.cube_cores // 2)}, reverse=True)
    configs = []
    for db in (True, False):
        f = 2 if db else 1
        for bm in bms:
            for bn in bns:
                if bm * bn * 4 > spec.l0c_bytes:
                    continue
                for bk in bks:
                    if (bm * bk + bk * bn) * ci * f + bn * 4 > spec.l1_bytes:
                        continue
                    if (
                        work.mixed
                        and _ub_need(work, bm, bn, bk, db, spec.ub_bytes) > spec.ub_bytes
                    ):
                        continue
                    m, n, k = _l0_tile(bm, bn, bk, ci, db, target)
                    configs += [
                        KernelConfig(
                            block_dim=c,
                            base_m=bm,
                            base_n=bn,
                            base_k=bk,
                            m=m,
                            n=n,
                            k=k,
                            double_buffer=db,
                        )
                        for c in cores
                    ]
    return configs


def _ub_need(work: CubeWork, bm: int, bn: int, bk: int, db: bool, ub_bytes: int) -> int:
    """UB bytes on each of the two vector cores sharing a mixed tile.

    The vector side works through its half of the tile in row chunks, so only one chunk must
    fit; a row reduction (LayerNorm) needs whole rows, which it assembles from the L2 hand-off
    of every tile of the row block. A prologue works through its half of an operand block
    (its sources in, the operand out) the same way, before the epilogue.
    """
    f = 2 if db else 1
    pro = 0
    for of in dict.fromkeys(of for _, _, _, of in work.sources):
        item = work.a_item if of == work.a else work.b_item
        io = item + sum(it * min(1.0, r) for _, it, r, o in work.sources if o == of)
        width = bk if of == work.a else bn
        pro = max(
            pro,
            int(
                min(
                    (bm if of == work.a else bk) / 2 * width * io * f,
                    max(width * io * f, ub_bytes),
                )
            ),
        )
    if not work.vec_ops:
        return pro
    io = 4 + sum(it * min(1.0, r) for _, it, r, _ in work.vec_inputs)
    io += sum(it * min(1.0, r) for _, it, r, side in work.outputs if side == "vector")
    width = work.N if work.full_row else bn
    row = width * io * f + width * 4
    rows = bm / 2 if not work.full_row else max(1.0, bm * bn / (2 * work.N))
    return max(pro, int(min(rows * row, max(row, ub_bytes))))


def lower_cube(
    work: CubeWork,
    configs: list[KernelConfig],
    target: Target,
    name: str,
    ops: tuple[str, ...],
    kind: str,
    signature: str,
) -> KernelBatch:
    """Lower a cube group under many tilings at once."""
    spec = target.spec
    n = len(configs)
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
    f = np.where(db, 2, 1)
    fed = {of for _, _, _, of in work.sources}
    # a prologue hands its operand to the cube through a per-core workspace (kernel.py), named
    # apart from the tensor so that a prologue result also read outside keeps a real store
    ws = {of: workspace(of, "operand") for of in fed}
    a_per_batch = work.a_bytes / (work.batch if work.a_batched else 1)
    # a row-major A block is base_m runs of base_k elements; a conv input runs along its rows
    a_run = ke if work.reuse == 1.0 and work.a_run == work.K else work.a_run
    b_per_batch = work.b_bytes / (work.batch if work.b_batched else 1)
    a_step = np.maximum(1, a_per_batch / work.reuse / (gi * steps))
    b_step = np.maximum(1, b_per_batch / (steps * gj))
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
            (np.full(n, spec.l0_align_bytes) if work.b_weight else ne * work.b_item).astype(
                np.int64
            ),
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
    for t, it, ratio, of in work.sources:
        key, step_bytes, of_item = keys[of]
        nbytes = np.maximum(it, np.ceil(step_bytes / of_item * it * ratio)).astype(np.int64)
        streams.append(
            StreamBatch(
                t,
                "MTE2",
                nbytes,
                np.minimum(nbytes, ke * it),
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
                ws[of], "MTE3", nbytes, np.minimum(nbytes, ke * of_item), key, side="vector"
            )
        )
    for t, it in work.bias:
        streams.append(
            StreamBatch(
                t,
                "MTE2",
                (ne * it).astype(np.int64),
                (ne * it).astype(np.int64),
                "j",
                per="tile",
                tensor_bytes=work.N * it,
            )
        )
    out_tile = me * ne
    out_elems = work.batch * work.M * work.N
    split = spec.is_split
    blocks = work.batch * gi * gj * steps
    for t, it, ratio, side in work.outputs:
        if t in fed:
            # a prologue result also read outside: each (tile, step) writes its share of the
            # operand block it made (the tiles of a row or column all make the same block), so
            # the tensor is written once
            total = int(ratio * out_elems * it)
            nbytes = np.maximum(it, np.ceil(total / blocks)).astype(np.int64)
            streams.append(
                StreamBatch(
                    t,
                    "MTE3",
                    nbytes,
                    np.minimum(nbytes, ke * it),
                    "bijk",
                    side="vector",
                    tensor_bytes=total,
                )
            )
            continue
        nbytes = np.maximum(it, out_tile * it * min(1.0, ratio)).astype(np.int64)
        streams.append(
            StreamBatch(
                t,
                "FIX" if side == "cube" else "MTE3",
                nbytes,
                (ne * it).astype(np.int64),
                "bij",
                per="tile",
                side=side,
                tensor_bytes=int(ratio * out_elems * it),
            )
        )
    vec_cycles = np.zeros(n)
    syncs = (steps if fed else np.zeros(n)).astype(np.int64)  # a prologue hand-off per step
    if work.vec_ops:
        hand = (out_tile * work.out_item).astype(np.int64)
        if split:
            streams.append(
                StreamBatch(
                    workspace(work.handoff, "fix"),
                    "FIX",
                    hand,
                    (ne * work.out_item).astype(np.int64),
                    "bij",
                    per="tile",
                    side="cube",
                    tensor_bytes=out_elems * work.out_item,
                )
            )
            streams.append(
                StreamBatch(
                    workspace(work.handoff, "fix"),
                    "MTE2",
                    hand,
                    (ne * work.out_item).astype(np.int64),
                    "bij",
                    per="tile",
                    side="vector",
                    tensor_bytes=out_elems * work.out_item,
                )
            )
            syncs += 1
        else:  # coupled: L0C -> UB directly, on FixPipe
            vec_cycles = vec_cycles + hand / spec.fixpipe_bytes_per_cycle
        for t, it, ratio, key in work.vec_inputs:
            nbytes = (ne * it) if key == "j" else np.maximum(it, out_tile * it * min(1.0, ratio))
            streams.append(
                StreamBatch(
                    t,
                    "MTE2",
                    nbytes.astype(np.int64),
                    (ne * it).astype(np.int64),
                    key,
                    per="tile",
                    side="vector",
                    tensor_bytes=int(ratio * out_elems * it),
                )
            )
        touched = [(op, out_tile * r * work.out_item) for op, r in work.vec_ops]
        # two vector cores share a tile: each does half the rows
        vec_cycles = vec_cycles + vector_cost(target, touched).cycles / 2
    pro = vector_cost(target, [(op, me * ke * r * work.out_item) for op, r in work.prologue])
    pro_cycles = pro.cycles / 2  # the tile's two vector cores share the prologue
    mmads = ceil_div(me, arr["m"]) * ceil_div(ne, arr["n"]) * ceil_div(ke, arr["k"])
    cube = mmads * spec.mmad_fixed_cycles + me * ne * ke / 4096.0 / work.rate
    ci = work.cube_item
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
                _ub_need(work, int(a), int(b), int(k), bool(d), spec.ub_bytes)
                for a, b, k, d in zip(arr["base_m"], arr["base_n"], arr["base_k"], db, strict=True)
            ]
        )
    return KernelBatch(
        name=name,
        ops=ops,
        kind=kind,
        unit="mixed" if work.mixed else "cube",
        configs=tuple(configs),
        grid=np.stack([np.full(n, work.batch, dtype=np.int64), gi, gj], axis=1),
        steps=steps,
        streams=tuple(streams),
        mte1_l0a_bytes=(me * ke * ci).astype(np.int64),
        mte1_l0b_bytes=(ke * ne * ci).astype(np.int64),
        mmads=mmads.astype(np.int64),
        cube_cycles=cube.astype(np.float64),
        vector_cycles_step=pro_cycles + np.zeros(n),
        vector_cycles_tile=vec_cycles,
        vector_instrs=np.zeros(n, dtype=np.int64),
        cross_core_syncs=syncs,
        footprint=foot,
        flops=work.flops,
        cube_flops=work.cube_flops,
        compulsory_bytes=work.compulsory,
        signature=signature,
    )
