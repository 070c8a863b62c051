"""Where a group's output element lies for a tile's element of its anchor (a matmul's product,
an attention's output): the anchor's index carried forward through the layout ops between
them (a transpose permutes it, a view re-shapes it), so an output written through a
transpose or a reshape is stored where the tile computed it, not read back off the tile."""

from __future__ import annotations

from autotune.codegen.indexing import Index, reshape_index
from autotune.codegen.kernel_io import KernelIO
from search_space.ir import VIEW_OPS, Op

__all__ = ["placed_index"]


def _path(io: KernelIO, tensor: str, anchor: str) -> list[Op] | None:
    """Ops from ``anchor`` to ``tensor`` (last first) through layout ops and elementwise ops
    of the traced tensor's own shape; None when there is no such path."""
    if tensor == anchor:
        return []
    op = io.graph.producer(tensor)
    if op is None or op.name not in io.ops:
        return None
    if op.op_type in VIEW_OPS or op.op_type == "Transpose":
        rest = _path(io, op.inputs[0], anchor)
        return None if rest is None else [op, *rest]
    if op.op_class.value != "elementwise":
        return None
    for t in op.inputs:
        if t and io.shape(t) == io.shape(tensor):
            rest = _path(io, t, anchor)
            if rest is not None:
                return [op, *rest]
    return None


def _forward(io: KernelIO, op: Op, idx: Index) -> Index:
    src, dst = io.shape(op.inputs[0]), io.shape(op.outputs[0])
    if op.op_type == "Transpose":
        perm = op.attr("perm") or list(reversed(range(len(src))))
        return tuple(idx[p] for p in perm)
    if op.op_type in VIEW_OPS:
        return reshape_index(idx, src, dst)
    return idx  # elementwise of the same shape


def placed_index(io: KernelIO, tensor: str, anchor: str, anchor_idx: Index) -> Index | None:
    """The index of ``tensor`` holding the element the tile computed at ``anchor_idx`` of
    ``anchor``, or None when ``tensor`` is not reached from the anchor by such ops."""
    path = _path(io, tensor, anchor)
    if path is None:
        return None
    idx = anchor_idx
    for op in reversed(path):
        idx = _forward(io, op, idx)
    return idx
