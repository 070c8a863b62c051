"""Whether an attention's scores are causally masked, so that fully masked blocks of keys can
be skipped (the attention template does not visit them; the cost model does not price them).

A causal mask is recognised by its values, however the exporter builds it: an additive mask
(``ConstantOfShape`` and ``Trilu``, a literal constant, a ``Where`` of a comparison of
``Range``s) or a boolean one applied with ``Where(mask, scores, very negative)``, as long as
it is known at compile time (:func:`~search_space.onnx.constant_value.constant_value`). The
query at row ``s`` then sees the keys ``[0, s + 1 + offset)`` and no other: a block of keys
past that bound contributes ``exp(-huge) = 0`` to every row of a query block, and skipping
it changes no output. A mask known only at run time (a padding mask from the caller) is never
taken for causal.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from search_space.ir import FusionGroup, Graph, Op, is_compile_time
from search_space.onnx.constant_value import constant_value

__all__ = ["MASKED", "causal_offset", "group_causal_offset"]

# a score at or below this is masked: exp(score - row max) is 0 in float32 for any score a
# model produces (exp(-1e4) underflows; fp16 masks use -65504 or the float minimum)
MASKED = -1.0e4
_NOTHING, _OTHER = "nothing", "other"  # a mask that hides nothing; one not causal
Verdict = int | str | None  # an offset, _NOTHING, _OTHER, or None: not known at compile time
_CACHE: dict[tuple[int, str, tuple[int, int]], tuple[weakref.ref[Graph], Verdict]] = {}


def causal_offset(
    graph: Graph, chain: Sequence[Op], scores: str, shape: tuple[int, int]
) -> int | None:
    """The offset of a causal mask on ``scores`` (``shape``: its last two dims, S x T) applied
    by the ops of ``chain`` (the attention group's score ops): query ``s`` sees keys ``j <= s +
    offset`` and nothing else; None when the masks are not all known at compile time, not of
    that form, or mask nothing. Masks that are each causal hide together what the one with the
    smallest offset hides; one that hides nothing (a finite bias) changes nothing."""
    after = _downstream(graph, chain, scores)  # the ops the scores pass through
    masks = [op for op in chain if op.name in after and _mask_operand(graph, op)]
    if not all(_reaches_softmax_masked(graph, chain, op) for op in masks):
        return None
    verdicts = [_verdict(graph, op, shape) for op in masks]
    if any(v is None or v == _OTHER for v in verdicts):
        return None
    offsets = [v for v in verdicts if isinstance(v, int)]
    return min(offsets) if offsets else None


# ops that keep a masked score masked on its way to the softmax (adding a finite score, another
# mask, a cast, a view); a scale keeps it when it does not shrink it (Mul by >= 1, Div by <= 1)
_KEEP = frozenset(
    {
        "Add",
        "Sub",
        "Where",
        "Cast",
        "Identity",
        "Reshape",
        "Unsqueeze",
        "Squeeze",
        "Expand",
        "Max",
        "Softmax",
    }
)


def _downstream(graph: Graph, chain: Sequence[Op], tensor: str) -> set[str]:
    """The ops of ``chain`` that read ``tensor`` or what they compute from it."""
    inside = {op.name for op in chain}
    found: set[str] = set()
    todo = [tensor]
    while todo:
        for op in graph.consumers(todo.pop()):
            if op.name in inside and op.name not in found:
                found.add(op.name)
                todo += [o for o in op.outputs if o]
    return found


def _reaches_softmax_masked(graph: Graph, chain: Sequence[Op], mask: Op) -> bool:
    """Whether every path from the mask op to the softmax keeps a masked score masked."""
    inside = {op.name for op in chain}
    todo, seen = [mask.outputs[0]], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for op in graph.consumers(t):
            if op.name not in inside:
                continue
            if op.op_type == "Softmax":
                continue
            if (op.op_type == "Sub" and op.inputs[0] != t) or not _keeps(graph, op, t):
                return False
            todo += [o for o in op.outputs if o]
    return True


def _keeps(graph: Graph, op: Op, tensor: str) -> bool:
    """Whether ``op`` keeps the masked scores in ``tensor`` masked."""
    if op.op_type in _KEEP:
        return True
    if op.op_type not in ("Mul", "Div"):
        return False
    other = [t for t in op.inputs if t and t != tensor]
    value = constant_value(graph, other[0]) if len(other) == 1 else None
    if value is None or value.size != 1:
        return False
    scale = float(value.ravel()[0])
    return scale >= 1.0 if op.op_type == "Mul" else 0.0 < scale <= 1.0


def _verdict(graph: Graph, op: Op, shape: tuple[int, int]) -> Verdict:
    """What the mask ``op`` applies is, cached per graph, mask op and shape (every layer's
    Add reads the one causal mask: it is evaluated once)."""
    key = (id(graph), _mask_key(graph, op), shape)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is graph:
        return hit[1]
    plane = _masked(graph, op, shape)
    verdict: Verdict = None if plane is None else _offset(plane)
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[key] = (weakref.ref(graph), verdict)
    return verdict


def _mask_key(graph: Graph, op: Op) -> str:
    """What decides a mask op's verdict: its kind, its mask operand and, for a Where, which
    branch is the fill and which tensor fills."""
    if op.op_type == "Add":
        return f"Add:{_mask_operand(graph, op)}"
    fill_first = is_compile_time(graph, op.inputs[1])
    return f"Where:{op.inputs[0]}:{fill_first}:{op.inputs[1] if fill_first else op.inputs[2]}"


def group_causal_offset(
    graph: Graph, group: FusionGroup, qk: Op, pv: Op, shape: tuple[int, int]
) -> int | None:
    """:func:`causal_offset` of an attention group (its products ``qk`` and ``pv``, its
    scores ``shape``), or None when a tensor computed from the scores leaves the group (the
    masked entries are then needed: nothing may be skipped)."""
    chain = [graph.op(n) for n in group.ops if n not in (qk.name, pv.name)]
    if _scores_leave(graph, group, qk, pv):
        return None
    return causal_offset(graph, chain, qk.outputs[0], shape)


def _scores_leave(graph: Graph, group: FusionGroup, qk: Op, pv: Op) -> bool:
    """Whether a tensor computed from the scores (before the second product) is an output
    of the group."""
    chain = [graph.op(n) for n in group.ops if n != pv.name]
    made = {o for n in _downstream(graph, chain, qk.outputs[0]) for o in graph.op(n).outputs}
    return qk.outputs[0] in group.outputs or any(t in made for t in group.outputs)


def _mask_operand(graph: Graph, op: Op) -> str | None:
    """The compile-time operand by which ``op`` masks the scores: an Add's, or a Where's
    condition (its other branch a constant); None for any other op."""
    if op.op_type == "Add":
        const = [t for t in op.inputs if t and is_compile_time(graph, t)]
        return const[0] if len(const) == 1 else None
    if op.op_type == "Where" and op.inputs[0] and is_compile_time(graph, op.inputs[0]):
        fills = [t for t in op.inputs[1:] if is_compile_time(graph, t)]
        return op.inputs[0] if len(fills) == 1 else None
    return None


def _masked(graph: Graph, op: Op, shape: tuple[int, int]) -> np.ndarray | None:
    """The [S, T] plane of scores ``op`` masks (True: masked), when it is the same for every
    batch and head; None when it cannot be known."""
    operand = _mask_operand(graph, op)
    value = constant_value(graph, operand) if operand else None
    if value is None:
        return None
    if op.op_type == "Add":
        masked = np.asarray(value) <= MASKED  # in the mask's own type: no copy
    else:
        x, y = op.inputs[1], op.inputs[2]
        fill_first = is_compile_time(graph, x)
        fill = constant_value(graph, x if fill_first else y)
        if fill is None or fill.size != 1 or not float(fill.ravel()[0]) <= MASKED:
            return None
        cond = np.asarray(value, dtype=bool)
        masked = cond if fill_first else ~cond
    return _plane(masked, shape)


def _plane(masked: np.ndarray, shape: tuple[int, int]) -> np.ndarray | None:
    """``masked`` broadcast to its last two dims ``shape``, when every leading index agrees."""
    m = masked
    while m.ndim > 2:
        if m.shape[0] > 1 and not np.array_equal(m, np.broadcast_to(m[:1], m.shape)):
            return None
        m = m[0]
    try:
        return np.broadcast_to(m.reshape((1,) * (2 - m.ndim) + m.shape), shape)
    except ValueError:
        return None


def _offset(masked: np.ndarray) -> Verdict:
    """A masked plane's causal offset, ``_NOTHING`` when it hides nothing, else ``_OTHER``."""
    rows, keys = masked.shape
    visible = (~masked).sum(axis=1)
    if visible.min() == keys:
        return _NOTHING
    offset = int(visible[0]) - 1
    want = np.minimum(keys, np.arange(rows) + 1 + offset)
    if offset < 0 or not np.array_equal(visible, want):
        return _OTHER
    prefix = np.arange(keys)[None, :] < visible[:, None]
    return offset if np.array_equal(~masked, prefix) else _OTHER
