"""ScatterND with compile-time indices, read as part of any kernel: the in-place KV-cache
update of a decode step (``past[b, h, pos, :] = new[b, h, 0, :]``) and scatters like it.

An output element is the update written there, or the data's element. The indices must be
regular: each coordinate they name is either one constant for every update row (the cache
slot) or the row's own position along one of its axes (batch, head), so the row an output
element belongs to is read off its index, never searched for."""

from __future__ import annotations

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index
from autotune.codegen.kernel_io import KernelIO, Reader
from autotune.codegen.source import paren
from search_space.ir import Op

__all__ = ["SCATTER_HANDLERS", "scattered_index"]


def _coordinates(indices: np.ndarray) -> list[tuple[str, int]]:
    """Per coordinate of the indices: ("const", value) or ("axis", row axis it follows)."""
    rows = indices.shape[:-1]
    grid = np.indices(rows) if rows else np.zeros((0,), dtype=np.int64)
    out: list[tuple[str, int]] = []
    for k in range(indices.shape[-1]):
        col = indices[..., k]
        if np.all(col == col.flat[0]):
            out.append(("const", int(col.flat[0])))
            continue
        axis = next((a for a in range(len(rows)) if np.array_equal(col, grid[a])), None)
        if axis is None:
            raise Unsupported("ScatterND indices that are neither constant nor a row's position")
        out.append(("axis", axis))
    return out


def _scatter(io: KernelIO, op: Op) -> tuple[list[tuple[str, int]], tuple[int, ...]]:
    """The coordinates of a ScatterND's indices (see :func:`_coordinates`) and the shape of
    its update rows.

    Raises:
        Unsupported: a reduction, indices known only at run time or not regular.
    """
    if (op.attr("reduction", "none") or "none") != "none":
        raise Unsupported(f"ScatterND with reduction {op.attr('reduction')}")
    indices = io.constant(op.inputs[1]).astype(np.int64)
    r = indices.shape[-1]
    indices = np.where(indices < 0, indices + np.array(io.shape(op.inputs[0])[:r]), indices)
    return _coordinates(indices), tuple(indices.shape[:-1])


def scattered_index(io: KernelIO, op: Op, idx: Index) -> Index | None:
    """Where a ScatterND writes element ``idx`` of its updates (None where it cannot say:
    irregular indices, or update rows that land on one element)."""
    try:
        coords, rows = _scatter(io, op)
    except Unsupported:
        return None
    followed = {a for kind, a in coords if kind == "axis"}
    if any(rows[a] != 1 and a not in followed for a in range(len(rows))):
        return None  # rows no coordinate tells apart: several land on one element
    head = tuple(str(v) if kind == "const" else idx[v] for kind, v in coords)
    return (*head, *idx[len(rows) :])


def _scatter_nd(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    data, upd = op.inputs[0], op.inputs[2]
    coords, rows = _scatter(p.io, op)
    r = len(coords)
    row = ["0"] * len(rows)
    conds = []
    for k, (kind, value) in enumerate(coords):
        if kind == "const":
            conds.append(f"({paren(idx[k])} == {value})")
        elif row[value] != "0":  # a second coordinate following the same row axis
            conds.append(f"({paren(idx[k])} == {paren(row[value])})")
        else:
            row[value] = idx[k]
    if any(row[a] == "0" and rows[a] != 1 for a in range(len(rows))):
        raise Unsupported("ScatterND rows that no coordinate tells apart")
    base = p.value(data, idx, mask)
    if not conds:
        conds = ["(1 == 1)"]
    hit = p.bind(" & ".join(conds), "hit")
    new = p.value(upd, (*row, *idx[r:]), p.bind(f"{mask} & {hit}", "mask"))
    return f"tl.where({hit}, {new}, {base})"


SCATTER_HANDLERS = {"ScatterND": _scatter_nd}
