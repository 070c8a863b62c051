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
from autotune.codegen.kernel_io import Reader
from autotune.codegen.source import paren
from search_space.ir import Op

__all__ = ["SCATTER_HANDLERS"]


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


def _scatter_nd(p: Reader, op: Op, t: str, idx: Index, mask: str) -> str:
    if (op.attr("reduction", "none") or "none") != "none":
        raise Unsupported(f"ScatterND with reduction {op.attr('reduction')}")
    data, ind_t, upd = op.inputs[:3]
    indices = p.io.constant(ind_t).astype(np.int64)
    shape = p.io.shape(data)
    r, rows = indices.shape[-1], indices.shape[:-1]
    indices = np.where(indices < 0, indices + np.array(shape[:r]), indices)
    coords = _coordinates(indices)
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
