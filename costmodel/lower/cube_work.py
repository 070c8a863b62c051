"""Analysis of a cube group: its anchor(s), the matmul dimensions (convolutions as implicit
im2col), its operands and their sources, what rides on FixPipe and what needs the vector cores.

The result, a :class:`CubeWork`, is computed once per group and lowered under many configs by
:mod:`costmodel.lower.cube`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.lower.common import inplace_writes, mem_itemsize
from costmodel.spec import Target
from search_space.ir import FusionGroup, Graph, Op, OpClass, alias_root, is_compile_time

__all__ = [
    "C0",
    "FIXPIPE_OPS",
    "FRACTAL",
    "GEMV_ROWS",
    "SCALAR_MAX",
    "CubeWork",
    "analyse_cube",
    "ub_need",
]

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
FRACTAL = 16  # rows and columns of the cube's fractal
GEMV_ROWS = 32  # at most two fractal row blocks: a decode step's batch of 1 to 32 (cube_gemv)


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
    if M < FRACTAL and math.prod(b[:-2]) == 1:
        # batches of fewer rows than a fractal against one B (a weight; a decode step's one
        # token per sequence) share the fractal as rows of one matmul, as a linear layer's
        # kernel runs them: B read once per row block, not once per padded batch
        M = math.prod(a[:-1])
    batch = max(1, math.prod(out) // max(1, M * N))
    return batch, M, N, K, 1.0, int(K)


def _operands(anchor: Op) -> tuple[str, str]:
    if anchor.op_type == "QLinearConv" or anchor.op_type == "QLinearMatMul":
        return anchor.inputs[0], anchor.inputs[3]
    return anchor.inputs[0], anchor.inputs[1]


def _fixpipe_chain(
    graph: Graph, members: list[Op], anchors: list[Op], N: int, target: Target
) -> tuple[list[Op], list[tuple[str, int]], set[str]]:
    """The FixPipe chain: single-consumer per-channel ops right after each anchor, the bias
    tensors they read (with their item sizes), and the tensors the chain has produced by its
    end (the anchors' outputs and views of them included)."""
    fix: list[Op] = []
    bias: list[tuple[str, int]] = []
    names = {op.name for op in members}
    frontier = {t for op in anchors for t in op.outputs if t}
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
        if not (
            op.op_type in FIXPIPE_OPS
            and data
            and per_channel
            and not _after_activation(fix, op)
            and all(c.name in names for t in data for c in graph.consumers(t))
            and len(graph.consumers(data[0])) == 1
        ):
            break
        fix.append(op)
        frontier.update(t for t in op.outputs if t)
        bias += [
            (t, mem_itemsize(graph, t, target))
            for t in others
            if graph.tensors[t].numel > SCALAR_MAX
        ]
    return fix, bias, frontier


def _written(graph: Graph, vec: list[Op]) -> dict[str, int]:
    """Elements an epilogue's in-place update writes, by tensor: its updates' elements, and 0
    for the buffer it updates (never read)."""
    inplace = inplace_writes(graph, vec)
    written = {t: graph.tensors[w.updates].numel for t, w in inplace.items()}
    written.update({w.buffer: 0 for w in inplace.values()})
    return written


def _epilogue_inputs(
    graph: Graph, members: list[Op], vec: list[Op], N: int, out_elems: int, target: Target
) -> list[tuple[str, int, float, str]]:
    """What the vector epilogue reads from outside the group (not scalars, nor a buffer an
    in-place update only writes): each with its item size, elements per output element and
    its block key (per column, or per output block)."""
    produced = {t for op in members for t in op.outputs if t}
    written = _written(graph, vec)
    out = []
    for t in dict.fromkeys(t for op in vec for t in op.inputs if t and t not in produced):
        numel = graph.tensors[alias_root(graph, t)].numel
        if written.get(t, 1) == 0 or numel <= SCALAR_MAX:
            continue
        key = "j" if numel == N else "bij"
        out.append((t, mem_itemsize(graph, t, target), numel / out_elems, key))
    return out


def _handoff(
    graph: Graph, members: list[Op], vec: list[Op], frontier: set[str], anchor: Op
) -> str:
    """The tensor the cube hands the vector epilogue: the first the chain produced that the
    epilogue reads ("" without an epilogue)."""
    if not vec:
        return ""
    order = [t for op in members for t in op.outputs if t in frontier]
    crossing = [t for t in order if any(c in vec for c in graph.consumers(t))]
    return crossing[0] if crossing else anchor.outputs[0]


def _epilogue_ops_and_outputs(
    graph: Graph, group: FusionGroup, vec: list[Op], out_elems: int, target: Target
) -> tuple[tuple[tuple[Op, float], ...], tuple[tuple[str, int, float, str], ...]]:
    """The epilogue's ops, each with its elements per output element (the most it reads or
    writes), and the group's outputs: item size, elements per output element, and the side
    that writes them (the vector epilogue, or the cube's FixPipe)."""
    written = _written(graph, vec)
    vec_ops = tuple(
        (
            op,
            max(written.get(t, graph.tensors[t].numel) for t in (*op.inputs, *op.outputs) if t)
            / out_elems,
        )
        for op in vec
    )
    vec_outs = {t for op in vec for t in op.outputs if t}
    outputs = tuple(
        (
            t,
            mem_itemsize(graph, t, target),
            written.get(t, graph.tensors[t].numel) / out_elems,
            "vector" if t in vec_outs else "cube",
        )
        for t in group.outputs
    )
    return vec_ops, outputs


def _other_bytes(
    graph: Graph,
    vec: list[Op],
    sources: tuple[tuple[str, int, float, str], ...],
    bias: list[tuple[str, int]],
    vec_inputs: list[tuple[str, int, float, str]],
    outputs: tuple[tuple[str, int, float, str], ...],
) -> int:
    """Compulsory bytes besides the operands: a prologue's sources, the bias, the epilogue's
    inputs, and the outputs (what an in-place update writes of them)."""
    written = _written(graph, vec)
    total = sum(graph.tensors[t].numel * it for t, it, _, _ in sources)
    total += sum(graph.tensors[t].numel * it for t, it in bias)
    total += sum(int(graph.tensors[t].numel * it) for t, it, _, _ in vec_inputs)
    total += sum(int(written.get(t, graph.tensors[t].numel) * it) for t, it, _, _ in outputs)
    return int(total)


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
    a_item = mem_itemsize(graph, a, target, cube_operand=True)
    b_item = mem_itemsize(graph, b, target, cube_operand=True)
    a_root, b_root = alias_root(graph, a), alias_root(graph, b)
    out_elems = batch * M * N
    fix, bias, frontier = _fixpipe_chain(graph, members, anchors, N, target)
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
    vec_inputs = _epilogue_inputs(graph, members, vec, N, out_elems, target)
    vec_ops, outputs = _epilogue_ops_and_outputs(graph, group, vec, out_elems, target)
    a_bytes = graph.tensors[a_root].numel * a_item
    b_bytes = sum(graph.tensors[alias_root(graph, t)].numel for t in b_names) * b_item
    conv = anchor.op_type in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv")
    fed = {of for _, _, _, of in sources}
    compulsory = (0 if a_root in fed else a_bytes) + (0 if b_root in fed else b_bytes)
    compulsory += _other_bytes(graph, vec, sources, bias, vec_inputs, outputs)
    a_shape = graph.tensors[a_root].static_shape
    b_shape = graph.tensors[b_root].static_shape
    return CubeWork(
        batch=batch,
        M=M,
        N=N,
        K=K,
        a=a_root,
        a_item=a_item,
        a_weight=is_compile_time(graph, a),
        a_batched=batch > 1 and (conv or math.prod(a_shape[:-2]) > 1),
        a_bytes=a_bytes,
        a_run=run,
        reuse=reuse,
        conv=conv,
        b=b_root,
        b_item=b_item,
        b_weight=is_compile_time(graph, b),
        b_batched=batch > 1 and (conv or math.prod(b_shape[:-2]) > 1),
        b_bytes=b_bytes,
        cube_item=target.cube_itemsize(graph.tensors[a_root].itemsize),
        rate=target.cube_rate(graph.tensors[a_root].itemsize),
        bias=tuple(bias),
        vec_ops=vec_ops,
        vec_inputs=tuple(vec_inputs),
        prologue=prologue,
        sources=sources,
        outputs=outputs,
        handoff=_handoff(graph, members, vec, frontier, anchor),
        out_item=mem_itemsize(graph, anchor.outputs[0], target),
        full_row=any(op.op_class is OpClass.REDUCE for op in vec),
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


def ub_need(work: CubeWork, bm: int, bn: int, bk: int, db: bool, ub_bytes: int) -> int:
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
