"""What a fused attention group computes: Q, K, V, masks, the softmax chain and its sizes.

Grouped-query attention whose K/V broadcast (an Expand of whole (T, D) matrices, as HF's
``repeat_kv`` exports it) is inside the group is read from the cache itself: the query heads
sharing a KV head are folded into the rows (M) of one (batch, KV head) block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodel.lower.causal import group_causal_offset
from costmodel.lower.common import inplace_writes, mem_itemsize
from costmodel.spec import Target
from search_space.ir import FusionGroup, Graph, Op, OpClass, alias_root

__all__ = ["AttentionWork", "analyse_attention"]


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
    side_inputs: tuple[tuple[str, int, int], ...]  # read once per tile
    vec_ops: tuple[Op, ...]
    output: tuple[str, int]
    extra_outputs: tuple[tuple[str, int, int], ...]
    flops: int
    cube_flops: int
    compulsory: int
    kv_bytes: tuple[int, int]
    # whether the rows of Q, K and V lie back to back in the layout the kernel reads them in
    # (``_rows_packed``), rather than apart (BSND read as BNSD): their streams' ``packed``
    packed: tuple[bool, bool, bool] = (False, False, False)
    # a causal mask on the scores (query s sees keys j <= s + causal and no other,
    # costmodel.lower.causal): the key blocks past a query block's last visible key are
    # skipped; ``heads`` query heads folded into the rows (grouped-query), S / heads each
    causal: int | None = None
    heads: int = 1

    @property
    def positions(self) -> np.ndarray:
        """Each row's query position (rows of folded heads repeat them)."""
        return np.arange(self.S) % (self.S // self.heads)

    @property
    def visible_share(self) -> float:
        """The share of the score matrix a causal mask leaves visible (1 without one)."""
        if self.causal is None:
            return 1.0
        seen = np.minimum(self.T, self.positions + 1 + self.causal)
        return float(seen.sum()) / (self.S * self.T)


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
    made = {t: op for op in members for t in op.outputs if t}
    (k, k_rep), (v, v_rep) = (_kv_source(graph, made, t) for t in (qk.inputs[1], pv.inputs[1]))
    causal = group_causal_offset(graph, group, qk, pv, (S, T))
    heads = 1
    if k_rep > 1 and k_rep == v_rep and bh % k_rep == 0:
        # the kernel reads the cache and serves `rep` query heads per KV head
        bh, S, heads = bh // k_rep, S * k_rep, k_rep
    else:
        k, v = (_kv_source(graph, made, t, expand=False)[0] for t in (qk.inputs[1], pv.inputs[1]))
    item = mem_itemsize(graph, qk.inputs[0], target)
    kv_bytes = (graph.tensors[k].numel * item, graph.tensors[v].numel * item)
    q = _kv_source(graph, made, qk.inputs[0], expand=False)[0]
    q_bytes = graph.tensors[q].numel * item
    inplace = inplace_writes(graph, members)
    buffers = {w.buffer for w in inplace.values()}
    q, k, v = (_read_from(graph, group, made, t) for t in (q, k, v))
    mask, side = _inputs(graph, group, made, (qk, pv), (q, k, v, *buffers), target)
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
    compulsory = q_bytes + sum(kv_bytes) + graph.tensors[main].numel * item
    compulsory += sum(n * it for _, it, n in (*mask, *side, *extra))
    return AttentionWork(
        bh=bh,
        S=S,
        T=T,
        D=D,
        Dv=out[-1],
        q=q,
        k=k,
        v=v,
        item=item,
        cube_item=target.cube_itemsize(graph.tensors[q].itemsize),
        rate=target.cube_rate(graph.tensors[q].itemsize),
        mask=mask,
        side_inputs=side,
        vec_ops=vec_ops,
        output=(main, mem_itemsize(graph, main, target)),
        extra_outputs=extra,
        flops=sum(op.flops for op in members),
        cube_flops=sum(op.cube_flops for op in members),
        compulsory=int(compulsory),
        kv_bytes=kv_bytes,
        packed=(
            _rows_packed(graph, made, qk.inputs[0], -2, -1),
            _rows_packed(graph, made, qk.inputs[1], -1, -2),
            _rows_packed(graph, made, pv.inputs[1], -2, -1),
        ),
        causal=causal,
        heads=heads,
    )


def _rows_packed(graph: Graph, made: dict[str, Op], operand: str, row: int, width: int) -> bool:
    """Whether the rows of ``operand`` (its axes ``row`` and ``width``, negative) lie back to
    back where the kernel reads them: walking back through the group's Transposes, views that
    keep the two axes (Reshape, Unsqueeze, Expand...), a cache update written in place, a
    Concat along the row axis and an elementwise op of the operand's shape (a rotary
    embedding), the width axis must end up last and the row axis just before it (a BSND
    cache read as BNSD puts the heads between them; a K^T is read as K). Any other op on the
    way: not packed."""
    t, seen = operand, 0
    rank = len(graph.tensors[t].static_shape)
    row, width = row % rank, width % rank
    while (op := made.get(t)) is not None and op.inputs and seen <= len(made):
        seen += 1
        out_shape = graph.tensors[t].static_shape
        if op.op_type == "Transpose":
            perm = list(op.attr("perm") or reversed(range(len(out_shape))))
            row, width, t = perm[row], perm[width], op.inputs[0]
            continue
        if op.op_class is OpClass.ELEMENTWISE and not op.is_view:
            # computed in place of its operand (a rotary embedding): the load is of the
            # input of its own shape, in that input's layout
            same = [i for i in op.inputs if i and graph.tensors[i].static_shape == out_shape]
            if not same:
                return False
            t = same[0]
            continue
        src = op.inputs[0]
        in_shape = graph.tensors[src].static_shape
        lead, tail = len(out_shape) - len(in_shape), len(out_shape) - 2
        keeps = min(row, width) >= tail and tuple(in_shape[-2:]) == tuple(out_shape[-2:])
        if op.op_type == "Concat":
            keeps = keeps or (op.attr("axis", 0) % len(out_shape) == row and row >= tail)
        elif not (op.is_view or op.op_type in ("Expand", "Tile", "ScatterND")):
            return False
        if not keeps:
            return False
        row, width, t = row - lead, width - lead, src
    rank = len(graph.tensors[t].static_shape)
    return width == rank - 1 and row == rank - 2


def _read_from(graph: Graph, group: FusionGroup, made: dict[str, Op], tensor: str) -> str:
    """The group input an operand computed inside the group carries the data of (one of its
    size, else its largest: the buffer a cache update writes into, Q before its rotary
    embedding, the past of a concatenated cache), so that the read has that tensor's name
    (its L2 identity) and a store of the operand itself (a cache the group also outputs) is
    not taken for a hand-off."""
    if tensor not in made:
        return tensor
    size = graph.tensors[tensor].numel
    ins = [t for t in _feeders(made, tensor) if t not in made and t in group.inputs]
    return max(
        ins, key=lambda t: (graph.tensors[t].numel == size, graph.tensors[t].numel), default=tensor
    )


Inputs = tuple[tuple[str, int, int], ...]  # (tensor, itemsize, elements)


def _inputs(
    graph: Graph,
    group: FusionGroup,
    made: dict[str, Op],
    cubes: tuple[Op, Op],
    read: tuple[str, ...],
    target: Target,
) -> tuple[Inputs, Inputs]:
    """The group's masks (inputs of the score chain, streamed with each block of scores) and
    its side inputs (what else Q, K and V are computed from: a rotary table, a cache's new
    rows; read once per tile). ``read`` are the inputs Q, K and V are read from."""
    qk, pv = cubes
    operand = set().union(*(_feeders(made, t) for t in (qk.inputs[0], qk.inputs[1], pv.inputs[1])))
    stop = {qk.outputs[0], pv.outputs[0]}
    chain = [op for t, op in made.items() if t not in operand and op not in cubes]
    masked = set().union(*(_feeders(made, t, stop) for op in chain for t in op.inputs if t))

    def entry(t: str) -> tuple[str, int, int]:
        return (t, mem_itemsize(graph, t, target), graph.tensors[t].numel)

    # (a shape or an axes argument, a scalar: not data the kernel streams)
    outside = [
        t for t in group.inputs if t not in made and t not in read and graph.tensors[t].numel > 16
    ]
    mask = tuple(entry(t) for t in outside if t in masked)
    side = tuple(entry(t) for t in outside if t in operand and t not in masked)
    return mask, side


def _kv_source(
    graph: Graph, made: dict[str, Op], tensor: str, expand: bool = True
) -> tuple[str, int]:
    """The tensor a K or V operand is read from, and how many times it is repeated: walks back
    through the group's views and Transposes (the kernel loads K in whichever layout) and,
    with ``expand``, one Expand or Tile that repeats whole (T, D) matrices (grouped-query
    attention's repeat_kv)."""
    t, seen = tensor, 0
    while (op := made.get(t)) is not None and op.inputs and seen <= len(made):
        seen += 1
        if op.op_type in ("Expand", "Tile"):
            src, dst = graph.tensors[op.inputs[0]], graph.tensors[t]
            rep = dst.numel // max(1, src.numel)
            same_matrix = src.static_shape[-2:] == dst.static_shape[-2:]
            if expand and rep > 1 and rep * src.numel == dst.numel and same_matrix:
                return alias_root(graph, op.inputs[0]), rep
            break
        if not (op.is_view or op.op_type == "Transpose"):
            break
        t = op.inputs[0]
    return alias_root(graph, t), 1


def _feeders(made: dict[str, Op], tensor: str, stop: set[str] | None = None) -> set[str]:
    """Every tensor ``tensor`` is computed from inside the group, itself included (not walking
    past the tensors in ``stop``)."""
    out, stack = set(), [tensor]
    while stack:
        t = stack.pop()
        if t in out:
            continue
        out.add(t)
        if (op := made.get(t)) is not None and not (stop and t in stop):
            stack += [i for i in op.inputs if i]
    return out
