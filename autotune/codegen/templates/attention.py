"""Attention: ``softmax(epilogue(Q @ K^T)) @ V`` as flash attention, one kernel (or two with a
key split), with the ops that make Q, K and V (transposes, a rotary embedding, the grouped-query
broadcast of K and V) and the score's ops (scale, additive or boolean mask) read in place.

Each program takes ``TILE_Q`` query rows of one batch (the plan's ``base_m``) and walks the
keys ``TILE_KV`` at a time (the plan's ``kv_tile``) with the online softmax, so the score
matrix is never stored. With ``kv_split = S > 1`` (flash-decoding) the keys are cut into S
ranges, one program each; the first kernel writes each range's unnormalised output and its
row maximum and sum, and a second kernel combines them and runs the output's epilogue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import (
    Index,
    broadcast_index,
    lane_index,
    numel,
    offset,
    same_index,
    sample,
    unflatten,
)
from autotune.codegen.pull import KernelIO, Pull, lanes
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    Scratch,
    block_of,
    check_outputs,
    finish,
    kernel_io,
    next_pow2,
    store,
)
from autotune.codegen.templates.placement import placed_index
from autotune.codegen.templates.pointwise import side_outputs
from costmodel.lower.causal import group_causal_offset
from search_space.ir import FusionGroup, Graph, KernelConfig, Op

__all__ = ["attention_kernels"]

LANES = lanes(
    {
        "Q": (0, "BLOCK_Q"),
        "D": (1, "BLOCK_D"),
        "DR": (0, "BLOCK_D"),
        "KV": (1, "BLOCK_KV"),
        "KVR": (0, "BLOCK_KV"),
        "DV": (1, "BLOCK_DV"),
    },
    q="Q",
    d="D",
    dk="DR",
    kv="KV",
    kvr="KVR",
    dv="DV",
    qmask="Q",
    qdmask="QD",
    ktmask="DRKV",
    smask="QKV",
    vmask="KVRDV",
    omask="QDV",
)


@dataclass(frozen=True)
class _Shape:
    """The attention of a group: its two matmuls, the softmax, and their sizes."""

    qk: Op
    softmax: Op
    pv: Op
    batch: tuple[int, ...]
    sq: int
    sk: int
    d: int
    dv: int
    # the exporters' guard Where(IsNaN(p), 0, p) between the softmax and the second matmul:
    # a fully masked row (NaN probabilities) gives zeros, not NaN
    nan_guard: bool = False
    # a causal mask on the scores (query q sees keys <= q + causal only,
    # costmodel.lower.causal): each query tile stops at its last visible key
    causal: int | None = None

    @property
    def nb(self) -> int:
        return math.prod(self.batch)

    def bidx(self, dims: tuple[int, ...]) -> Index:
        return broadcast_index(unflatten("b", self.batch), self.batch, dims)

    def env(self, col: str, cols: int) -> dict[str, np.ndarray]:
        return {
            "b": sample(self.nb)[:, None, None],
            "q": sample(self.sq)[None, :, None],
            col: sample(cols)[None, None, :],
        }


def _find(graph: Graph, group: FusionGroup, io: KernelIO) -> _Shape:
    ops = [graph.op(o) for o in group.ops]
    soft = [op for op in ops if op.op_type == "Softmax"]
    mms = [op for op in ops if op.op_type == "MatMul"]
    if len(soft) != 1 or len(mms) != 2:
        raise Unsupported("attention other than two matmuls around one softmax")
    probs = soft[0].outputs[0]
    guarded = _nan_guard(graph, group, io, probs)
    pv = next((m for m in mms if m.inputs[0] in (probs, guarded)), None)
    if pv is None:
        raise Unsupported("the softmax's output is not the second matmul's left operand")
    qk = next(m for m in mms if m is not pv)
    s_shape, o_shape = io.shape(qk.outputs[0]), io.shape(pv.outputs[0])
    rank = len(s_shape)
    default = 1 if graph.opset < 13 else -1  # before opset 13: the input flattened at axis
    if int(soft[0].attr("axis", default)) % rank != rank - 1 or len(o_shape) != rank:
        raise Unsupported("a softmax over other than the keys")
    if s_shape[:-1] != o_shape[:-1] or io.shape(pv.inputs[1])[-2] != s_shape[-1]:
        raise Unsupported(f"attention shapes {s_shape} and {o_shape} do not line up")
    d = io.shape(qk.inputs[0])[-1]
    causal = group_causal_offset(graph, group, qk, pv, (s_shape[-2], s_shape[-1]))
    guard = pv.inputs[0] == guarded
    batch = s_shape[:-2]
    return _Shape(qk, soft[0], pv, batch, s_shape[-2], s_shape[-1], d, o_shape[-1], guard, causal)


def _nan_guard(graph: Graph, group: FusionGroup, io: KernelIO, probs: str) -> str:
    """The output of ``Where(IsNaN(probs), 0, probs)`` in the group ('' if there is none)."""
    ops = set(group.ops)
    for op in graph.consumers(probs):
        if op.name not in ops or op.op_type != "Where" or len(op.inputs) != 3:
            continue
        cond, zero, value = op.inputs
        test = graph.producer(cond)
        if (
            value == probs
            and test is not None
            and test.name in ops
            and test.op_type == "IsNaN"
            and test.inputs[0] == probs
            and io.literals.get(zero) in ("0.0", "0", "-0.0")
        ):
            return op.outputs[0]
    return ""


def _normalised(att: _Shape, acc: str, total: str) -> str:
    """The output row: ``acc`` over the softmax's sum ``total`` (lanes past the last query
    divide by 1; with the NaN guard, so does a fully masked row, whose ``acc`` is 0)."""
    live = "qmask & (" + total + " > 0.0)" if att.nan_guard else "qmask"
    return f"o = {acc} / tl.where({live}, {total}, 1.0)"


def _tiles(config: KernelConfig, att: _Shape) -> tuple[int, int, int]:
    """Query and key tiles (the plan's ``base_m`` and ``kv_tile``) and the key split. Triton's
    blocks are powers of two: where padding the head dimension to one would take a key or
    value tile past the plan's (``kv_tile`` keys of the real head size), the key tile halves
    until it fits, as the cost model sized L1 for the plan's tile."""
    tq = max(1, min(config.base_m or 16, att.sq))
    plan_kv = config.knob("kv_tile", config.base_n or 64)
    tkv = max(1, min(plan_kv, att.sk))
    width, budget = block_of(max(att.d, att.dv)), plan_kv * max(att.d, att.dv)
    while tkv > 16 and block_of(tkv) * width > budget:
        tkv = next_pow2(tkv) // 2
    split = max(1, min(config.knob("kv_split", 1), math.ceil(att.sk / tkv)))
    return tq, tkv, split


def _at(att: _Shape, io: KernelIO, tensor: str, cols: tuple[str, str]) -> Index:
    """The index of a matmul operand or result at the tile's lanes ``cols``."""
    shape = io.shape(tensor)
    return att.bidx(shape[:-2]) + lane_index(cols, shape[-2:])


def _anchor(att: _Shape, io: KernelIO, tensor: str, cols: tuple[str, str], value: str, size: int):
    expected = _at(att, io, tensor, cols)

    def resolve(pull: Pull, idx: Index, mask: str) -> str:
        if not same_index(idx, expected, att.env(cols[1], size)):
            raise Unsupported("the attention's epilogue reads the scores off their tile")
        return value

    return resolve


def _tile_vars(att: _Shape, row: Body, tiles_q: int, split: int) -> None:
    row.line(f"b = tile // {tiles_q * split}")
    row.line(f"tq = (tile // {split}) % {tiles_q}" if split > 1 else f"tq = tile % {tiles_q}")
    if split > 1:
        row.line(f"sp = tile % {split}")
    row.line("lane_q = tl.arange(0, BLOCK_Q)[:, None]")
    row.line("q = tq * TILE_Q + lane_q")
    row.line(f"qmask = (lane_q < TILE_Q) & (q < {att.sq})")
    row.line("d = tl.arange(0, BLOCK_D)[None, :]")
    row.line("dk = tl.arange(0, BLOCK_D)[:, None]")
    row.line("dv = tl.arange(0, BLOCK_DV)[None, :]")
    row.line(f"qdmask = qmask & (d < {att.d})")
    row.line(f"omask = qmask & (dv < {att.dv})")


def _dot(a: str, b: str, dtype: str) -> str:
    """``a @ b`` with operands in ``dtype`` (``KernelIO.dot_dtype``), summed in float32."""
    if dtype != "float32":
        return f"tl.dot({a}.to(tl.{dtype}), {b}.to(tl.{dtype}))"
    return f'tl.dot({a}, {b}, input_precision="ieee")'


def _dot_dtype(att: _Shape, io: KernelIO) -> str:
    """The narrowest operand format of the two products (the scores', the output's)."""
    return io.dot_dtype(*att.qk.inputs, att.pv.inputs[1])


def _kv_loop(att: _Shape, io: KernelIO, row: Body, chunk: int, split: int) -> None:
    """The online softmax over this program's keys; leaves ``acc``, ``m_i``, ``l_i``."""
    qt = Pull(io, row, LANES).tile(
        att.qk.inputs[0], _at(att, io, att.qk.inputs[0], ("q", "d")), "qdmask"
    )
    row.line("m_i = tl.full([BLOCK_Q, 1], float('-inf'), tl.float32)")
    row.line("l_i = tl.zeros([BLOCK_Q, 1], dtype=tl.float32)")
    row.line("acc = tl.zeros([BLOCK_Q, BLOCK_DV], dtype=tl.float32)")
    inner = row.child()
    start = f"sp * {chunk}" if split > 1 else "0"
    end = f"sp * {chunk} + {chunk}" if split > 1 else str(att.sk)
    if att.causal is not None:  # the key blocks past the tile's last visible key: all masked
        row.line(f"hi = tl.minimum((tq + 1) * TILE_Q + {att.causal}, {end})")
        end = "hi"
    inner.line("lane_kv = tl.arange(0, BLOCK_KV)")
    inner.line("kv = k0 + lane_kv[None, :]")
    inner.line("kvr = k0 + lane_kv[:, None]")
    inner.line(f"kvmask = (lane_kv[None, :] < TILE_KV) & (kv < {att.sk})")
    inner.line(f"kvrmask = (lane_kv[:, None] < TILE_KV) & (kvr < {att.sk})")
    inner.line(f"ktmask = (dk < {att.d}) & kvmask")
    inner.line("smask = qmask & kvmask")
    inner.line(f"vmask = kvrmask & (dv < {att.dv})")
    scores = att.qk.outputs[0]
    pull = Pull(io, inner, LANES, {scores: _anchor(att, io, scores, ("q", "kv"), "s", att.sk)})
    kt = pull.tile(att.qk.inputs[1], _at(att, io, att.qk.inputs[1], ("dk", "kv")), "ktmask")
    inner.line(f"s = {_dot(qt, kt, io.dot_dtype(*att.qk.inputs))}")
    x = pull.value(att.softmax.inputs[0], _at(att, io, scores, ("q", "kv")), "smask")
    inner.line(f"x = tl.where(smask, {x}, float('-inf'))")
    inner.line("m_new = tl.maximum(m_i, tl.max(x, axis=1)[:, None])")
    inner.line("m_use = tl.where(m_new == float('-inf'), 0.0, m_new)")
    inner.line("alpha = tl.exp(m_i - m_use)")
    inner.line("p = tl.exp(x - m_use)")
    inner.line("l_i = l_i * alpha + tl.sum(p, axis=1)[:, None]")
    v = pull.tile(att.pv.inputs[1], _at(att, io, att.pv.inputs[1], ("kvr", "dv")), "vmask")
    inner.line(f"acc = acc * alpha + {_dot('p', v, io.dot_dtype(att.pv.inputs[1]))}")
    inner.line("m_i = m_new")
    row.nest(f"for k0 in range({start}, {end}, TILE_KV):", inner)


def _out_index(att: _Shape, shape: tuple[int, ...]) -> Index:
    if shape[-2:] == (att.sq, att.dv) and math.prod(shape[:-2]) == att.nb:
        return unflatten("b", shape[:-2]) + lane_index(("q", "dv"), shape[-2:])
    return unflatten(f"b * {att.sq * att.dv} + q * {att.dv} + dv", shape)


def _epilogue(att: _Shape, io: KernelIO, group: FusionGroup, row: Body, out: str) -> None:
    o = att.pv.outputs[0]
    pull = Pull(io, row, LANES, {o: _anchor(att, io, o, ("q", "dv"), out, att.dv)})
    size = att.nb * att.sq * att.dv
    for pos, t in enumerate(group.outputs):
        if numel(io.shape(t)) != size:
            continue  # written by its own loop (side_outputs)
        idx = placed_index(io, t, o, _at(att, io, o, ("q", "dv"))) or _out_index(att, io.shape(t))
        value = pull.value(t, idx, "omask")
        ptr = pull.pointer(f"out{pos}", offset(idx, io.shape(t)), "omask")
        row.line(store(ptr, io.storage(t), io.fit(t, value), "omask"))


def _constexprs(tq: int, tkv: int, att: _Shape) -> tuple[tuple[str, int], ...]:
    return (
        ("TILE_Q", tq),
        ("BLOCK_Q", block_of(tq)),
        ("TILE_KV", tkv),
        ("BLOCK_KV", block_of(tkv)),
        ("BLOCK_D", block_of(att.d)),
        ("BLOCK_DV", block_of(att.dv)),
    )


def _scratch(name: str, att: _Shape, split: int) -> tuple[Scratch, ...]:
    rows = (att.nb, split, att.sq)
    return (
        Scratch(f"{name}::acc", (*rows, att.dv), "float32"),
        Scratch(f"{name}::max", rows, "float32"),
        Scratch(f"{name}::sum", rows, "float32"),
    )


def _partial_store(att: _Shape, row: Body, split: int) -> None:
    """The split kernel's result: its keys' unnormalised output, row maximum and sum."""
    base = f"(b * {split} + sp) * {att.sq} + q"
    row.line(f"tl.store(out0 + ({base}) * {att.dv} + dv, acc, mask=omask)")
    row.line(f"tl.store(out1 + {base}, m_i, mask=qmask)")
    row.line(f"tl.store(out2 + {base}, l_i, mask=qmask)")


def _combine(att: _Shape, row: Body, split: int, part: dict[str, str]) -> None:
    """Merge the split kernel's ranges: weights exp(m_s - max) on outputs and sums."""
    acc, mx, sm = part["acc"], part["max"], part["sum"]
    base = f"(b * {split} + s) * {att.sq} + q"
    row.line("m_all = tl.full([BLOCK_Q, 1], float('-inf'), tl.float32)")
    row.line(f"for s in range(0, {split}):")
    row.line(
        f"    m_all = tl.maximum(m_all, tl.load({mx} + {base}, mask=qmask, other=float('-inf')))"
    )
    row.line("m_use = tl.where(m_all == float('-inf'), 0.0, m_all)")
    row.line("num = tl.zeros([BLOCK_Q, BLOCK_DV], dtype=tl.float32)")
    row.line("den = tl.zeros([BLOCK_Q, 1], dtype=tl.float32)")
    row.line(f"for s in range(0, {split}):")
    row.line(f"    w = tl.exp(tl.load({mx} + {base}, mask=qmask, other=float('-inf')) - m_use)")
    row.line(f"    num = num + w * tl.load({acc} + ({base}) * {att.dv} + dv, mask=omask, other=0)")
    row.line(f"    den = den + w * tl.load({sm} + {base}, mask=qmask, other=0)")
    row.line(_normalised(att, "num", "den"))


def attention_kernels(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> list[KernelSource]:
    """The kernel (or, with a key split, the split and combine kernels) of an attention group,
    its products' operands in the format ``precision`` (the plan's mode) gives them.

    Raises:
        Unsupported: not two matmuls around one softmax over the keys, an output not of the
            attention's size, or an epilogue that reads the scores or the output off its tile.
    """
    check_outputs(graph, group.outputs)
    io = kernel_io(graph, group, precision)
    att = _find(graph, group, io)
    tq, tkv, split = _tiles(config, att)
    tiles_q = math.ceil(att.sq / tq)
    chunk = math.ceil(math.ceil(att.sk / split) / tkv) * tkv
    tiles = att.nb * tiles_q * split
    blocks = _constexprs(tq, tkv, att)
    body = Body(1)
    row = body.child()
    _tile_vars(att, row, tiles_q, split)
    _kv_loop(att, io, row, chunk, split)
    if split == 1:
        row.line(_normalised(att, "acc", "l_i"))
        _epilogue(att, io, group, row, "o")
        body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
        side = side_outputs(io, group, att.nb * att.sq * att.dv, body)
        return [
            finish(
                name,
                graph,
                group,
                config,
                io,
                body,
                tiles,
                (*blocks, *side),
                "attention",
                dot_dtype=_dot_dtype(att, io),
            )
        ]
    scratch = _scratch(name, att, split)
    _partial_store(att, row, split)
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    first = finish(
        f"{name}_split",
        graph,
        group,
        config,
        io,
        body,
        tiles,
        blocks,
        "attention",
        outputs=[s.name for s in scratch],
        scratch=scratch,
        dot_dtype=_dot_dtype(att, io),
    )
    return [first, _combine_kernel(name, graph, group, config, io, att, scratch, blocks)]


def _combine_kernel(
    name: str,
    graph: Graph,
    group: FusionGroup,
    config: KernelConfig,
    io: KernelIO,
    att: _Shape,
    scratch: tuple[Scratch, ...],
    blocks: tuple[tuple[str, int], ...],
) -> KernelSource:
    """Merges the split kernel's partial results (read from scratch) and runs the epilogue:
    one program per query tile, the split kernel's tiles and blocks."""
    params = dict(io.params)
    part = {}
    for s in scratch:
        params[s.name] = f"in{len(params)}"
        part[s.name.rsplit("::", 1)[1]] = params[s.name]
    cio = KernelIO(io.graph, io.ops, params, io.literals, io.precision)
    split = scratch[0].shape[1]
    tiles_q = math.ceil(att.sq / dict(blocks)["TILE_Q"])
    body = Body(1)
    row = body.child()
    _tile_vars(att, row, tiles_q, 1)
    _combine(att, row, split, part)
    _epilogue(att, cio, group, row, "o")
    tiles = att.nb * tiles_q
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    side = side_outputs(cio, group, att.nb * att.sq * att.dv, body)
    # its results went through the split kernel's dots
    return finish(
        f"{name}_combine",
        graph,
        group,
        config,
        cio,
        body,
        tiles,
        (*blocks, *side),
        "attention",
        scratch=scratch,
        dot_dtype=_dot_dtype(att, io),
    )
