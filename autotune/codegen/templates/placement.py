"""Where a group's output element lies for a tile's element of its anchor (a matmul's product,
an attention's output): the anchor's index carried forward through the layout ops between
them (a transpose permutes it, a view re-shapes it, a split, a slice or a gather of constant
consecutive positions shifts it to its piece, a concat shifts it into its own piece, a
ScatterND of constant indices moves its update rows to their slots), so an output written
through them is stored where the tile computed it, not read back off the tile. A piece holds
only some of the tile's elements: the placement says which (its guards). A concat's or a
scatter's output holds elements the tile did not compute (the other pieces, the rest of the
cache: its holes): the template writes those apart, reading the tile's piece nowhere."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, add, reshape_index
from autotune.codegen.kernel_io import KernelIO
from autotune.codegen.layout import slice_params, split_start
from autotune.codegen.pull import Anchor, Pull
from autotune.codegen.scatter import scattered_index
from autotune.codegen.source import paren
from search_space.ir import VIEW_OPS, Op

__all__ = ["Placed", "guarded", "placed", "placed_index", "placed_value"]


@dataclass(frozen=True)
class Placed:
    """The output's index for the tile's element, and the conditions (Triton expressions of
    the tile's lanes) under which that element belongs to the output at all."""

    index: Index
    guards: tuple[str, ...] = ()
    # (output of a Gather, Concat or ScatterND on the way, its index here, the input the tile
    # comes through, its index there): the element such an op takes is the tile's own (under
    # the guards), not one it reads at run time
    picks: tuple[tuple[str, Index, str, Index], ...] = ()
    # the tile's piece: the input of the first Concat or ScatterND on the way that the tile
    # comes through; the output's other elements (its holes) come from that op's other inputs
    piece: str = ""

    def anchors(self) -> dict[str, Anchor]:
        """Each picked tensor read where the tile holds it (a pull's extra anchors)."""
        return {t: _pick(t, at, data, data_at) for t, at, data, data_at in self.picks}


def _pick(tensor: str, at: Index, data: str, data_at: Index) -> Anchor:
    """``tensor`` at ``at`` is ``data`` at ``data_at``; anywhere else it is another tile's."""

    def resolve(pull: Pull, idx: Index, mask: str) -> str:
        if idx != at:
            raise Unsupported(f"'{tensor}' is read off its tile")
        return pull.value(data, data_at, mask)

    return resolve


def _path(io: KernelIO, tensor: str, anchor: str) -> list[tuple[Op, str, str]] | None:
    """Ops from ``anchor`` to ``tensor`` (last first), each with the output the path takes
    and the input it comes from: views, Transpose, Split, unit Slices, Gathers of constant
    consecutive positions, Concats (through an input they take once), ScatterNDs of
    constant indices (through their updates) and elementwise ops of the traced tensor's own
    shape; None when there is no such path."""
    if tensor == anchor:
        return []
    op = io.graph.producer(tensor)
    if op is None or op.name not in io.ops:
        return None
    layout = op.op_type in VIEW_OPS or op.op_type in ("Transpose", "Split")
    if layout or _unit_slice(io, op) or _gather_run(io, op) is not None:
        sources = [op.inputs[0]]
    elif op.op_type == "Concat":  # an input taken twice has no one place in the output
        sources = [t for t in op.inputs if t and op.inputs.count(t) == 1]
    elif op.op_type == "ScatterND" and _scatters(io, op):
        sources = [op.inputs[2]]  # the updates; the data's other elements are holes
    elif op.op_class.value == "elementwise":
        sources = [t for t in op.inputs if t and io.shape(t) == io.shape(tensor)]
    else:
        return None
    for src in sources:
        rest = _path(io, src, anchor)
        if rest is not None:
            return [(op, tensor, src), *rest]
    return None


def _unit_slice(io: KernelIO, op: Op) -> bool:
    """A Slice of constant starts, ends, axes and steps, every step 1 (a piece of its input);
    opset 1's attribute form is not one."""
    if op.op_type != "Slice" or len(op.inputs) < 3:
        return False
    try:
        return all(step == 1 for _, _, step in slice_params(io, op))
    except Unsupported:  # an input known only at run time
        return False


def _gather_run(io: KernelIO, op: Op) -> tuple[int, int, int] | None:
    """(axis, first, rank of the indices) of a Gather whose indices are a constant scalar or a
    run of consecutive positions (a slice in another form), else None."""
    if op.op_type != "Gather":
        return None
    try:
        ind = io.constant(op.inputs[1]).astype(np.int64)
    except Unsupported:  # indices known only at run time
        return None
    shape = io.shape(op.inputs[0])
    axis = int(op.attr("axis", 0)) % len(shape)
    flat = np.where(ind < 0, ind + shape[axis], ind).ravel()
    if ind.ndim > 1 or flat.size == 0 or np.any(np.diff(flat) != 1):
        return None
    return axis, int(flat[0]), ind.ndim


def _pieces(io: KernelIO, op: Op, out: str) -> list[tuple[int, int]]:
    """(axis, start) of each axis the piece ``out`` of a Split or a Slice is cut along."""
    if op.op_type == "Split":
        return [split_start(io, op, out)]
    src, dst = io.shape(op.inputs[0]), io.shape(out)
    return [(a, s) for a, s, _ in slice_params(io, op) if s or dst[a] != src[a]]


def _gather(io: KernelIO, op: Op, out: str, idx: Index) -> tuple[Index, list[str]]:
    run = _gather_run(io, op)
    assert run is not None  # _path takes only such a Gather
    axis, first, rank = run
    at = paren(idx[axis])
    if rank == 0:  # a scalar index drops the axis
        return (*idx[:axis], *idx[axis + 1 :]), [f"({at} == {first})"]
    n = io.shape(out)[axis]
    shifted = add(idx[axis], str(-first)) if first else idx[axis]
    return (*idx[:axis], shifted, *idx[axis + 1 :]), [f"({at} >= {first}) & ({at} < {first + n})"]


def _scatters(io: KernelIO, op: Op) -> bool:
    """A ScatterND whose updates land at positions known at compile time, one each."""
    rank = len(io.shape(op.inputs[2]))
    return scattered_index(io, op, ("0",) * rank) is not None


def _concat(io: KernelIO, op: Op, src: str, idx: Index) -> tuple[Index, list[str]]:
    axis = int(op.attr("axis")) % len(idx)
    start = sum(io.shape(t)[axis] for t in op.inputs[: op.inputs.index(src)] if t)
    res = list(idx)
    res[axis] = add(idx[axis], str(start)) if start else idx[axis]
    return tuple(res), []


def _forward(io: KernelIO, op: Op, out: str, src: str, idx: Index) -> tuple[Index, list[str]]:
    before, dst = io.shape(op.inputs[0]), io.shape(out)
    if op.op_type == "Gather":
        return _gather(io, op, out, idx)
    if op.op_type == "Concat":
        return _concat(io, op, src, idx)
    if op.op_type == "ScatterND":
        slot = scattered_index(io, op, idx)
        assert slot is not None  # _path takes only such a ScatterND
        return slot, []
    if op.op_type == "Transpose":
        perm = op.attr("perm") or list(reversed(range(len(before))))
        return tuple(idx[p] for p in perm), []
    if op.op_type in VIEW_OPS:
        return reshape_index(idx, before, dst), []
    if op.op_type in ("Split", "Slice"):
        res, guards = list(idx), []
        for axis, start in _pieces(io, op, out):
            at = paren(idx[axis])
            guards.append(f"({at} >= {start}) & ({at} < {start + dst[axis]})")
            res[axis] = add(idx[axis], str(-start)) if start else idx[axis]
        return tuple(res), guards
    return idx, []  # elementwise of the same shape


def placed(
    io: KernelIO, tensor: str, anchor: str, anchor_idx: Index, *, holes: bool = False
) -> Placed | None:
    """Where ``tensor`` holds the element the tile computed at ``anchor_idx`` of ``anchor``,
    or None when ``tensor`` is not reached from the anchor by such ops (or, unless
    ``holes``, only through a concat: a template that writes the holes asks for those)."""
    path = _path(io, tensor, anchor)
    if path is None:
        return None
    idx, guards, picks, piece = anchor_idx, [], [], ""
    for op, out, src in reversed(path):
        before = idx
        idx, more = _forward(io, op, out, src, idx)
        guards += more
        if op.op_type in ("Gather", "Concat", "ScatterND"):
            picks.append((out, idx, src, before))
        if op.op_type in ("Concat", "ScatterND"):
            piece = piece or src  # the innermost: an outer op's input holds holes too
    if piece and not holes:
        return None
    return Placed(idx, tuple(guards), tuple(picks), piece)


def placed_index(io: KernelIO, tensor: str, anchor: str, anchor_idx: Index) -> Index | None:
    """As :func:`placed`, for a tensor that holds every element of the tile (None when a
    split or a slice keeps only some)."""
    where = placed(io, tensor, anchor, anchor_idx)
    return where.index if where is not None and not where.guards else None


def guarded(pull: Pull, mask: str, guards: tuple[str, ...]) -> str:
    """``mask`` and the placement's guards; a guard on no lane (the tile's batch, one value
    per program) selects the mask whole, as Triton's interpreter takes no scalar in a mask."""
    lanes = [g for g in guards if pull.span(g)]
    out = pull.bind(" & ".join([mask, *lanes]), "mask") if lanes else mask
    for g in guards:
        if not pull.span(g):
            out = pull.bind(f"tl.where({g}, {out}, False)", "mask")
    return out


def placed_value(pull: Pull, where: Placed, tensor: str, mask: str) -> str:
    """``tensor``'s value at its placed index, a constant Gather on the way read as the pick
    of the tile's own element it is under the placement's guards."""
    kept = pull.anchors
    pull.anchors = {**kept, **where.anchors()}
    try:
        return pull.value(tensor, where.index, mask)
    finally:
        pull.anchors = kept
