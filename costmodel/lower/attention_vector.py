"""The vector side of a flash attention: how many rows of a score block one vector core
holds at a time, and its cycles per key step (the online softmax and the output's rescale).

On the split 910B each AIV of the pair takes half of a block's rows. A hand-written kernel
may take its half a few rows at a time (``vec_rows``), each slice a loop iteration of its own;
the search grid never slices.
"""

from __future__ import annotations

import numpy as np

from costmodel.lower.attention_work import AttentionWork
from costmodel.lower.common import ceil_div, vector_cost
from costmodel.spec import Target

__all__ = ["VEC_ROWS", "slice_rows", "softmax_cycles"]

VEC_ROWS = "vec_rows"


def slice_rows(bm: np.ndarray, asked: np.ndarray | None = None) -> np.ndarray:
    """Rows of a score block one vector core holds in UB at a time: its half of the block
    (the AIV pair splits the rows), or fewer where the config slices that half
    (``vec_rows``: a hand-written flash kernel softmaxes 8 or 32 rows at a time, so its
    query block is bounded by L1 and L0C, not by UB)."""
    half = np.maximum(bm // 2, 1)
    if asked is None:
        return half
    return np.where(asked > 0, np.minimum(asked, half), half)


def softmax_cycles(
    target: Target,
    work: AttentionWork,
    me: np.ndarray,
    ke: np.ndarray,
    rows: np.ndarray,
    Dv16: int,
) -> np.ndarray:
    """One AIV's vector cycles per step: the online softmax over its half of the scores
    and the rescale of its half of the output. A core that slices its half
    (:func:`slice_rows`) issues every pass once per slice, on the slice's bytes."""
    if not work.vec_ops:
        return np.zeros(len(me))
    rescale = vector_cost(target, [(work.vec_ops[0], me * Dv16 * 4.0)]).cycles / 2
    whole = vector_cost(target, [(op, me * ke * 4.0) for op in work.vec_ops]).cycles / 2
    half = ceil_div(me, 2)
    slices = ceil_div(half, rows)
    # each slice is a loop iteration: the scalar unit's bookkeeping comes before its
    # instructions issue, as in a vector kernel's loop
    scalar = slices * target.spec.scalar_iter_cycles
    if not (slices > 1).any():  # the search grid's configs never slice
        return whole + rescale + scalar
    each = np.minimum(rows, half) * ke * 4.0
    sliced = slices * vector_cost(target, [(op, each) for op in work.vec_ops]).cycles
    return np.where(slices > 1, sliced, whole) + rescale + scalar
