"""Layout op families of the fuzzing strategy (:mod:`fuzz_graphs`): views, Transpose, and the
ops that cut, join, gather or grow tensors. They move data, so a value keeps its interval
(padding adds zeros to it). The contract of a family is in :mod:`fuzz_ops`.
"""

from __future__ import annotations

import math

from fuzz_builder import MAX_NUMEL, Builder, Draw, Value
from hypothesis import strategies as st


def transpose(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """A Transpose by a permutation other than the identity."""
    perm = draw(st.permutations(range(v.rank)))
    if perm == sorted(perm):
        return None
    shape = tuple(v.shape[p] for p in perm)
    return b.one("Transpose", [v.name], shape, v.elem, v.lo, v.hi, perm=list(perm))


def reshape(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Reshape (two dims merged, or a 1 put in), Flatten, Unsqueeze or Squeeze."""
    kind = draw(st.sampled_from(["merge", "insert", "flatten", "unsqueeze", "squeeze"]))
    shape = v.shape
    if kind == "merge" and v.rank >= 2:
        i = draw(st.integers(0, v.rank - 2))
        shape = (*shape[:i], shape[i] * shape[i + 1], *shape[i + 2 :])
        dims = [-1 if draw(st.booleans()) and j == i else d for j, d in enumerate(shape)]
        return b.one("Reshape", [v.name, b.ints(dims)], shape, v.elem, v.lo, v.hi)
    if kind == "insert":
        i = draw(st.integers(0, v.rank))
        shape = (*shape[:i], 1, *shape[i:])
        return b.one("Reshape", [v.name, b.ints(shape)], shape, v.elem, v.lo, v.hi)
    if kind == "flatten":
        axis = draw(st.integers(-v.rank, v.rank))
        shape = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        return b.one("Flatten", [v.name], shape, v.elem, v.lo, v.hi, axis=axis)
    if kind == "unsqueeze" and v.rank < 5:
        i = draw(st.integers(0, v.rank))
        shape = (*shape[:i], 1, *shape[i:])
        ins, attrs = b.listed("axes", [i], since=13)
        return b.one("Unsqueeze", [v.name, *ins], shape, v.elem, v.lo, v.hi, **attrs)
    ones = [i for i, d in enumerate(shape) if d == 1]
    if kind != "squeeze" or not ones:
        return None
    shape = tuple(d for i, d in enumerate(shape) if i not in ones)
    ins, attrs = b.listed("axes", ones, since=13)
    return b.one("Squeeze", [v.name, *ins], shape, v.elem, v.lo, v.hi, **attrs)


def join(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Concat with a value of matching shape (itself included), Slice, or Split in two."""
    if v.rank == 0:
        return None
    axis = draw(st.integers(0, v.rank - 1))
    d = v.shape[axis]
    kind = draw(st.sampled_from(["concat", "slice", "split"]))
    if kind == "concat":
        same = [
            u for u in b.pool if u.elem == v.elem and u.rank == v.rank
            and all(x == y for i, (x, y) in enumerate(zip(u.shape, v.shape, strict=True))
                    if i != axis)
        ]  # fmt: skip
        u = draw(st.sampled_from(same))
        shape = tuple(x + u.shape[axis] if i == axis else x for i, x in enumerate(v.shape))
        lo, hi = min(v.lo, u.lo), max(v.hi, u.hi)
        return b.one("Concat", [v.name, u.name], shape, v.elem, lo, hi, axis=axis)
    if d < 2:
        return None
    cut = draw(st.integers(1, d - 1))
    if kind == "split":
        outs = [
            (tuple(n if i == axis else x for i, x in enumerate(v.shape)), v.elem, v.lo, v.hi)
            for n in (cut, d - cut)
        ]
        ins, attrs = b.listed("split", [cut, d - cut], since=13)
        return b.node("Split", [v.name, *ins], outs, axis=axis, **attrs)[-1]
    step = draw(st.sampled_from([1, 1, 2]))
    start = draw(st.sampled_from([0, cut - d]))  # negative starts count from the end
    n = len(range(start % d, d, step))
    shape = tuple(n if i == axis else x for i, x in enumerate(v.shape))
    ins = [v.name, b.ints([start]), b.ints([d]), b.ints([axis]), b.ints([step])]
    return b.one("Slice", ins, shape, v.elem, v.lo, v.hi)


def gather(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Gather along an axis by constant indices (a scalar, or a list with negatives)."""
    if v.rank == 0:
        return None
    axis = draw(st.integers(-v.rank, v.rank - 1))
    d = v.shape[axis]
    index = st.integers(-d, d - 1)
    picks = draw(st.one_of(index, st.lists(index, min_size=1, max_size=4)))
    idx = [picks] if isinstance(picks, int) else picks
    taken = () if isinstance(picks, int) else (len(picks),)
    a = axis % v.rank
    shape = (*v.shape[:a], *taken, *v.shape[a + 1 :])
    names = b.ints(idx) if taken else b.scalar_int(idx[0])
    return b.one("Gather", [v.name, names], shape, v.elem, v.lo, v.hi, axis=axis)


def grow(draw: Draw, b: Builder, v: Value, room: int) -> Value | None:
    """Expand (dims of 1 widened, or one put in front), Tile, or constant Pad."""
    kind = draw(st.sampled_from(["expand", "tile", "pad"]))
    reps = [draw(st.integers(1, 2)) for _ in v.shape]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * v.rank)]
    target = tuple(draw(st.sampled_from([1, 2, 3])) if d == 1 else d for d in v.shape)
    if draw(st.booleans()):
        target = (draw(st.integers(1, 3)), *target)
    shape = {
        "expand": target,
        "tile": tuple(d * r for d, r in zip(v.shape, reps, strict=True)),
        "pad": tuple(d + pads[i] + pads[i + v.rank] for i, d in enumerate(v.shape)),
    }[kind]
    if math.prod(shape) > MAX_NUMEL or (kind != "expand" and v.rank == 0):
        return None
    if kind == "expand":
        return b.one("Expand", [v.name, b.ints(target)], shape, v.elem, v.lo, v.hi)
    if kind == "tile":
        return b.one("Tile", [v.name, b.ints(reps)], shape, v.elem, v.lo, v.hi)
    lo, hi = min(v.lo, 0.0), max(v.hi, 0.0)
    return b.one("Pad", [v.name, b.ints(pads)], shape, v.elem, lo, hi, mode="constant")
