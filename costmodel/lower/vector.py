"""Lowering of vector-only groups: single elementwise/reduce/layout/opaque ops, vector chains
and row reductions (LayerNorm, RMSNorm, Softmax with their neighbours).

The group's data is viewed as ``rows x cols`` (cols = the reduced extent for a reduction,
else the last dim) and tiled in the Unified Buffer as ``ub_rows x ub_cols``. A reduction
keeps whole rows in UB; when one row does not fit, the row is split into ``steps`` chunks and
read twice (statistics pass, then the normalising pass); the second read of a chunk follows the
first by one row's chunks on its core, so it is a ``reread`` L2 serves (CANN's split-D
AddRmsNorm likewise reads back in its second pass the sum it stored in its first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from costmodel.kernel import KernelBatch, KernelConfig, StreamBatch
from costmodel.lower.common import ceil_div, inplace_writes, mem_itemsize, vector_cost
from costmodel.spec import Target
from search_space.ir import (
    GATHER_OPS,
    FusionGroup,
    Graph,
    Op,
    OpClass,
    alias_root,
    is_compile_time,
    reduction_axes,
)

__all__ = ["VectorWork", "analyse_vector", "lower_vector", "vector_grid"]

SCALAR_MAX = 16  # inputs this small ride in scalar registers, not streams


@dataclass(frozen=True)
class VectorWork:
    rows: int
    cols: int
    reduce: bool
    item: int  # UB working bytes per element
    run_bytes: int  # contiguous GM run of a full row-block (0: the tile is contiguous)
    inputs: tuple[tuple[str, int, int, bool], ...]  # (tensor, itemsize, numel, gathered rows)
    outputs: tuple[tuple[str, int, int], ...]  # (tensor, itemsize, numel)
    ops: tuple[tuple[Op, int], ...]  # (op, elements it touches)
    opaque: bool = False
    flops: int = 0
    compulsory: int = 0
    extra: dict[str, int] = field(default_factory=dict)
    normalise: bool = False  # a reduction whose full-size result needs the row statistics
    casts: float = 0.0  # bf16 elements cast to or from fp32, per element of the work
    scattered: tuple[tuple[str, int], ...] = ()  # in-place outputs: (tensor, bytes per slice)

    @property
    def elems(self) -> int:
        return self.rows * self.cols


def _reduced(op: Op, shape: tuple[int, ...], graph: Graph) -> tuple[int, int]:
    """(reduced extent, first reduced axis) of a reduction over ``shape``."""
    if not shape:
        return 1, 0
    axes = reduction_axes(
        op.op_type, dict(op.attributes), op.inputs, shape, graph.constants, graph.opset
    )
    return math.prod(shape[a] for a in axes), axes[0]


def analyse_vector(graph: Graph, group: FusionGroup, target: Target) -> VectorWork:
    """Describe a vector-only group as rows x cols with its streams and per-op work."""
    ops = [graph.op(n) for n in group.ops if not graph.op(n).is_view]
    # an in-place update moves its updates' elements, never its buffer (common.InPlace)
    inplace = inplace_writes(graph, ops)
    buffers = {w.buffer for w in inplace.values()}

    def sized(t: str) -> str:
        return inplace[t].updates if t in inplace else t

    # a gather touches only the rows it gathers, so its table (a weight or a runtime tensor:
    # a paged KV cache, an activation) never sizes the work; its output does
    gathered = {op.inputs[0] for op in ops if op.op_type in GATHER_OPS and op.inputs}
    acts = [
        sized(t)
        for op in ops
        for t in (*op.inputs, *op.outputs)
        if t
        and t not in buffers
        and t not in gathered
        and not is_compile_time(graph, t)
        and graph.tensors[sized(t)].numel > SCALAR_MAX
    ]
    big = max(
        acts or [sized(t) for op in ops for t in op.outputs if t],
        key=lambda t: graph.tensors[t].numel,
    )
    red, elems, cols, item, run = _view(graph, ops, big, target)
    rows = max(1, elems // cols)
    streamed = [t for t in (*group.inputs, *group.outputs) if t not in buffers]
    inputs = tuple(
        (
            t,
            mem_itemsize(graph, t, target),
            graph.tensors[alias_root(graph, t)].numel,
            t in gathered,
        )
        for t in group.inputs
        if t not in buffers
        and (graph.tensors[t].numel > SCALAR_MAX or not is_compile_time(graph, t))
    )
    outputs = tuple(
        (t, mem_itemsize(graph, t, target), graph.tensors[sized(t)].numel) for t in group.outputs
    )
    touched = []
    for op in ops:
        sizes = [
            graph.tensors[sized(t)].numel
            for t in (*op.inputs, *op.outputs)
            if t and t not in buffers and not is_compile_time(graph, t)
        ]
        if op.op_type in GATHER_OPS:
            sizes = [graph.tensors[t].numel for t in op.outputs if t]
        touched.append((op, max(sizes or [1])))
    compulsory = sum(
        min(n * it, sum(o[1] * o[2] for o in outputs)) if g else n * it for _, it, n, g in inputs
    ) + sum(it * n for _, it, n in outputs)
    return VectorWork(
        rows=rows,
        cols=cols,
        reduce=red is not None,
        item=item,
        run_bytes=run * item,
        inputs=inputs,
        outputs=outputs,
        ops=tuple(touched),
        opaque=any(op.op_class is OpClass.OPAQUE for op in ops),
        flops=sum(op.flops for op in ops),
        compulsory=compulsory,
        normalise=red is not None and any(n >= elems for _, _, n in outputs),
        casts=_cast_elements(graph, [sized(t) for t in streamed], target) / max(elems, 1),
        scattered=tuple((t, w.run * mem_itemsize(graph, t, target)) for t, w in inplace.items()),
    )


def _view(
    graph: Graph, ops: list[Op], big: str, target: Target
) -> tuple[Op | None, int, int, int, int]:
    """(the reduction, elements, cols, UB bytes per element, GM run in elements) of the work
    viewed as ``rows x cols`` around its largest tensor ``big``."""
    elems = max(graph.tensors[big].numel, 1)
    shape = graph.tensors[big].static_shape or (1,)
    red = next(
        (
            op
            for op in ops
            if op.op_class is OpClass.REDUCE and op.op_type not in ("MaxPool", "AveragePool")
        ),
        None,
    )
    run = 0
    if red is not None and red.inputs[0]:
        rshape = graph.tensors[red.inputs[0]].static_shape or (1,)
        cols, axis = _reduced(red, rshape, graph)
        elems = max(elems, math.prod(rshape))
        trailing = math.prod(rshape[axis:]) == cols
        if not trailing:  # reducing a middle axis: GM runs are the trailing dims
            run = math.prod(rshape[axis + 1 :]) or 1
    else:
        cols = shape[-1] if shape else 1
    cols = max(1, min(cols, elems))
    item = max(mem_itemsize(graph, big, target), 1)
    reduce_items = [target.vector_itemsize(graph.tensors[big].itemsize, reduce=True)]
    if red is not None:
        item = max(item, *reduce_items)
    return red, elems, cols, item, run


def _cast_elements(graph: Graph, tensors: list[str], target: Target) -> int:
    """Elements the group casts, of its streamed ``tensors``: the vector unit has no bf16
    arithmetic (CANN's vector intrinsics take fp16 and fp32), so bf16 data (the model's, or
    any float data under ``--precision bf16``) is cast to fp32 on the way in and back on the
    way out."""
    total = 0
    for t in tensors:
        ten = graph.tensors[alias_root(graph, t)]
        if target.precision == "bf16":
            bf16 = ten.dtype.startswith(("float", "bfloat"))
        else:
            bf16 = ten.dtype == "bfloat16" and target.precision in ("auto", "mixed")
        total += ten.numel if bf16 else 0
    return total


def vector_grid(work: VectorWork, target: Target) -> list[KernelConfig]:
    """Feasible UB tilings: row blocks by powers of two (whole rows when they fit, else
    32-byte-aligned chunks of a row), both buffering modes, all or half of the vector cores."""
    spec = target.spec
    align = max(1, spec.ub_align_bytes // work.item)
    full_cols = int(ceil_div(work.cols, align) * align)
    fits_row = _ub_bytes(work, 1, full_cols, False) <= spec.ub_bytes
    col_opts = [full_cols] if fits_row else []
    if not (work.reduce and fits_row):
        c = align * 8
        while c < full_cols:
            col_opts.append(c)
            c *= 2
    cores = sorted({spec.vector_cores, max(1, spec.vector_cores // 2)}, reverse=True)
    configs = []
    for db in (True, False):
        for ub_cols in col_opts:
            max_rows = work.rows if ub_cols >= full_cols else 1
            rows = 1
            while _ub_bytes(work, rows, ub_cols, db) <= spec.ub_bytes:
                configs += [
                    KernelConfig(block_dim=bd, ub_rows=rows, ub_cols=ub_cols, double_buffer=db)
                    for bd in cores
                ]
                if rows >= max_rows:
                    break
                rows *= 2
    if not configs and len(work.ops) == 1:  # a lone op always runs: smallest chunk
        configs.append(
            KernelConfig(
                block_dim=spec.vector_cores, ub_rows=1, ub_cols=align, double_buffer=False
            )
        )
    return configs


def _ub_bytes(work: VectorWork, rows: int, cols: int, db: bool) -> int:
    tile = rows * cols
    ins = sum(_tile_elems(work, n, rows, cols) * it for _, it, n, _ in work.inputs)
    outs = sum(_tile_elems(work, n, rows, cols) * it for _, it, n in work.outputs)
    temp = tile * 4 if (work.reduce or len(work.ops) > 1) else 0
    return int((ins + outs) * (2 if db else 1) + temp)


def _tile_elems(work: VectorWork, numel: int, rows: int, cols: int) -> int:
    if numel >= work.elems:
        return rows * cols
    if numel == work.cols:
        return cols
    if numel == work.rows:
        return rows
    return max(1, math.ceil(rows * cols * numel / work.elems))


@dataclass(frozen=True)
class _UbTiling:
    """A vector group's UB tiling under each config (one array entry per config): rows and
    columns a tile holds, the grid (``gi`` row blocks by ``gj`` column parts), steps per
    tile, whether a row is split, and the elements a tile-step moves (edges averaged)."""

    n: int
    R: np.ndarray
    C: np.ndarray
    db: np.ndarray
    split: np.ndarray
    gi: np.ndarray
    gj: np.ndarray
    steps: np.ndarray
    chunks: np.ndarray
    avg: np.ndarray
    passes: np.ndarray


def _ub_tiling(work: VectorWork, configs: list[KernelConfig]) -> _UbTiling:
    n = len(configs)
    R = np.array([c.ub_rows for c in configs], dtype=np.int64)
    C = np.minimum(np.array([c.ub_cols for c in configs], dtype=np.int64), work.cols)
    split = C < work.cols
    gi = ceil_div(work.rows, R)
    if work.reduce:
        # fewer rows than cores: each row is split into contiguous parts on several cores,
        # which combine their partial statistics after a cross-core sync
        cores = np.array([c.block_dim for c in configs], dtype=np.int64)
        chunks_per_row = ceil_div(work.cols, C)
        gj = np.where(split & (gi < cores), np.minimum(cores // gi, chunks_per_row), 1)  # >= 1
        steps = np.where(split, ceil_div(chunks_per_row, gj), 1)
    else:
        gj = ceil_div(work.cols, C)
        steps = np.ones(n, dtype=np.int64)
    chunks = gi * gj * steps
    return _UbTiling(
        n=n,
        R=R,
        C=C,
        db=np.array([c.double_buffer for c in configs], dtype=bool),
        split=split,
        gi=gi,
        gj=gj,
        steps=steps,
        chunks=chunks,
        avg=work.elems / chunks,  # elements moved per tile-step, edges averaged
        # a split row is read twice when its full-size result needs the row's statistics (a
        # norm, a softmax); a plain reduction streams it once
        passes=np.where(split & work.reduce & work.normalise, 2, 1),
    )


def _input_streams(work: VectorWork, u: _UbTiling) -> list[StreamBatch]:
    """Each input's loads: a gathered one by the output it feeds, a per-column or per-row
    vector once a tile, the rest a chunk a tile-step (a split row's again, for the
    normalising pass)."""
    out = []
    for t, it, numel, gathered in work.inputs:
        ratio = min(1.0, numel / work.elems)
        reread = None
        if gathered:
            out_bytes = sum(o[1] * o[2] for o in work.outputs)
            nbytes = np.maximum(it, out_bytes / u.chunks)
            key, run = "ij", np.maximum(it, nbytes / np.maximum(u.R, 1))
        elif numel == work.cols and work.rows > 1:
            nbytes, key, run = u.C * it, ("jk" if work.reduce else "j"), u.C * it
        elif numel == work.rows and work.cols > 1:
            nbytes, key, run = u.R * it, "i", u.R * it
        else:
            nbytes = np.maximum(it, u.avg * ratio * it) * u.passes
            key = "ijk" if work.reduce else "ij"
            run = _runs(work, u.R, u.C, it)
            if (u.passes > 1).any():  # the normalising pass reads the chunk again, moments later
                reread = (u.passes - 1.0) / u.passes
        out.append(
            StreamBatch(
                tensor=t,
                pipe="MTE2",
                bytes=np.ceil(nbytes).astype(np.int64),
                row_bytes=np.ceil(run).astype(np.int64),
                key=key,
                per="step" if work.reduce else "tile",
                side="vector",
                tensor_bytes=numel * it,
                reread=reread,
            )
        )
    return out


def _output_streams(work: VectorWork, u: _UbTiling) -> list[StreamBatch]:
    """Each output stored once a tile (one written slice by slice into the caller's buffer
    in runs no longer than its slices)."""
    scattered = dict(work.scattered)
    out = []
    for t, it, numel in work.outputs:
        ratio = min(1.0, numel / work.elems)
        total = np.maximum(it, u.avg * ratio * it) * u.steps  # stored once per tile
        run = _runs(work, u.R, u.C, it)
        if t in scattered:
            run = np.minimum(run, scattered[t])
        out.append(
            StreamBatch(
                tensor=t,
                pipe="MTE3",
                bytes=np.ceil(total).astype(np.int64),
                row_bytes=np.ceil(np.minimum(run, total)).astype(np.int64),
                key="ij",
                per="tile",
                side="vector",
                tensor_bytes=numel * it,
            )
        )
    return out


def lower_vector(
    work: VectorWork,
    configs: list[KernelConfig],
    target: Target,
    name: str,
    ops: tuple[str, ...],
    kind: str,
    signature: str,
) -> KernelBatch:
    """Lower a vector group under many UB tilings at once: the tiling, the input and output
    streams, then the cycles of a tile-step."""
    u = _ub_tiling(work, configs)
    n, steps, gj = u.n, u.steps, u.gj
    streams = _input_streams(work, u) + _output_streams(work, u)
    # bf16 data is computed in fp32 (see analyse_vector), with a cast pass per bf16 stream
    calc = max(work.item, 4) if work.casts else work.item
    touched: list[tuple[Op | str, np.ndarray]] = [
        (op, u.avg * min(1.0, e / work.elems) * calc * u.passes) for op, e in work.ops
    ]
    if work.casts:
        touched.append(("Cast", u.avg * work.casts * 4.0 * u.passes))
    vc = vector_cost(target, touched, opaque=work.opaque)
    # each loop iteration (tile-step) also runs the scalar unit's bookkeeping before its
    # vector instructions issue: queue and buffer hand-overs, DMA descriptors, flags
    cycles = vc.cycles + target.spec.scalar_iter_cycles
    zeros = np.zeros(n, dtype=np.int64)
    ub = np.array(
        [_ub_bytes(work, int(r), int(c), bool(d)) for r, c, d in zip(u.R, u.C, u.db, strict=True)]
    )
    step_cycles = np.where(steps > 1, cycles, 0.0)
    tile_cycles = np.where(steps > 1, 0.0, cycles)
    if work.reduce:  # the parts of a split row combine their statistics
        tile_cycles = tile_cycles + np.where(gj > 1, _combine(gj, target), 0.0)
    return KernelBatch(
        name=name,
        ops=ops,
        kind=kind,
        unit="vector",
        configs=tuple(configs),
        grid=np.stack([np.ones(n, dtype=np.int64), u.gi, gj], axis=1),
        steps=steps,
        streams=tuple(streams),
        mte1_l0a_bytes=zeros,
        mte1_l0b_bytes=zeros,
        mmads=zeros,
        cube_cycles=np.zeros(n),
        vector_cycles_step=step_cycles + zeros,
        vector_cycles_tile=tile_cycles + zeros,
        vector_instrs=(vc.instrs * steps + zeros),
        cross_core_syncs=zeros,
        footprint={"ub": ub},
        flops=work.flops,
        cube_flops=0,
        compulsory_bytes=work.compulsory,
        signature=signature,
    )


def _combine(parts: np.ndarray, target: Target) -> np.ndarray:
    """Cycles a core of a split row spends combining the row's partial statistics: a sync
    with the other cores of the row, a read of their partials (L2 hits: just written) and a
    reduction over them."""
    spec = target.spec
    fold = np.ceil(np.log2(np.maximum(parts, 1))) * spec.vector_issue_cycles
    return spec.cross_core_sync_cycles + spec.l2_latency_cycles + spec.vector_issue_cycles + fold


def _runs(work: VectorWork, R: np.ndarray, C: np.ndarray, it: int) -> np.ndarray:
    """Contiguous GM run of one block: the whole tile when it spans full rows."""
    if work.run_bytes:
        return np.full(R.shape, work.run_bytes, dtype=np.float64)
    whole = R * C * it
    return np.where(C >= work.cols, whole, C * it).astype(np.float64)
