"""Shrinking a group's row axis so its numerics run on a few rows, never on all of them.

One axis of the activations is scaled from E to e: every row axis of the group's main
activation is tried (batch, sequence, heads), under five tracking modes: every activation that
has the axis (or a multiple of it: the query heads of KV heads); the same with its divisors too
(a grouped-query attention's KV heads shrink with its query heads, whole KV groups kept); the
first plus inputs whose features hold the axis as their outer factor (a projection's output,
``heads x head_dim``, that a view in the group splits into heads: a KV cache's new row before
its Concat with the past); the activations shaped like the main one (Q and rotate_half(Q)); or
the main one alone (attention queries: keys and values keep all their rows, being contracted).
The choice is followed op by op: elementwise ops align it to the right, Transpose permutes it,
views (Reshape, Flatten, Squeeze, Unsqueeze) carry it to the output axis that starts with the
same outer block (so [B, S, H] -> [B*S, H] scales B*S), Gather, Split, Concat, Slice keep it
when they work on another axis. It is never a reduced axis (Softmax, LayerNorm, Reduce*), the
contraction axis K of a matmul, or a Conv's channel axis; a Conv's or pool's image rows may
shrink (a crop: every output still sums all input channels over its whole window), to the
fewest rows that every strided tensor on the way scales to whole. Reshape and Expand targets
that hard-code the axis are recomputed. Weights keep their shapes; a compile-time tensor that
meets the shrunk axis in an elementwise op (rotary tables, position embeddings, a causal mask
over query rows) is replaced, for that op only, by a copy cut to its first positions. Every
candidate is then checked by strict shape inference (``extract.validate_shapes``); the
extraction keeps the valid one closest to the rows asked for.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from autotune.verify.shrink_axes import NotShrinkable, Shape, out_axis, scatter_cut
from search_space.ir import FusionGroup, Graph, Op, OpClass, is_compile_time

__all__ = ["NotShrinkable", "Shrink", "group_rows", "plan_shrinks"]

_TRIES = 8  # row counts tried when the asked one does not scale every tensor whole


@dataclass(frozen=True)
class Shrink:
    """One consistent reduction: ``axis`` of each tracked tensor scaled from E to e rows."""

    axis: dict[str, int]
    extent: int
    new: int
    shapes: dict[str, Shape]
    targets: dict[int, np.ndarray]
    note: str
    # (node index, input position) -> (constant, its cut copy, axis, first n positions)
    cuts: dict[tuple[int, int], tuple[str, str, int, int]]
    kept: int = 0  # rows of the main activation after the cut


class _NotWhole(NotShrinkable):
    """A tensor on the way cannot scale to whole rows at this row count (more rows may)."""


def _scaled(op: Op, shape: Shape, axis: int, extent: int, new: int) -> Shape:
    d = shape[axis]
    if (d * new) % extent:
        raise _NotWhole(f"{op.name} ({op.op_type}) cannot scale {d} rows by {new}/{extent}")
    return (*shape[:axis], d * new // extent, *shape[axis + 1 :])


def _positional(graph: Graph, op: Op, land: int, axis: dict[str, int]) -> dict[int, int]:
    """Compile-time inputs of an elementwise op that span the shrunk axis (rotary tables,
    position embeddings, masks over query rows): a copy cut to their first positions feeds
    this op; other uses of the constant keep it whole."""
    out = graph.tensors[op.outputs[0]].static_shape
    found: dict[int, int] = {}
    for p, t in enumerate(op.inputs):
        if not t or t in axis or not is_compile_time(graph, t):
            continue
        shape = graph.tensors[t].static_shape
        k = land - (len(out) - len(shape))
        if 0 <= k < len(shape) and shape[k] == out[land] > 1:
            found[p] = k
    return found


def _projects_heads(graph: Graph, op: Op, extent: int) -> bool:
    """A MatMul against a weight whose output features hold ``extent`` heads (outer)."""
    if op.op_type != "MatMul" or len(op.inputs) < 2 or not is_compile_time(graph, op.inputs[1]):
        return False
    weight = graph.tensors[op.inputs[1]].static_shape
    n = graph.tensors[op.outputs[0]].static_shape[-1:] or (0,)
    return n[0] > extent and n[0] % extent == 0 and len(weight) == 2


def _walk(
    graph: Graph,
    group: FusionGroup,
    tracked: dict[str, int],
    extent: int,
    new: int,
    born: bool = False,
) -> Shrink:
    """Follow the shrunk axis op by op from ``tracked``; ``born``: a projection in the group
    whose input lacks the axis starts it in its output features, its weight's columns cut
    (the first output features need only the first columns)."""
    shapes = {t: graph.tensors[t].static_shape for t in _tensors(graph, group)}
    axis = dict(tracked)
    for t, a in tracked.items():
        shapes[t] = _scaled(graph.op(group.ops[0]), shapes[t], a, extent, new)
    targets: dict[int, np.ndarray] = {}
    cuts: dict[tuple[int, int], tuple[str, str, int, int]] = {}
    for i, name in enumerate(group.ops):
        op = graph.op(name)
        ax = {p: axis[t] for p, t in enumerate(op.inputs) if t in axis}
        if not ax and not (born and _projects_heads(graph, op, extent)):
            continue
        if ax:
            land = out_axis(graph, op, ax)
            found = (
                _positional(graph, op, land, axis) if op.op_class is OpClass.ELEMENTWISE else {}
            )
        else:  # the projection: its output features and its weight's columns
            land = len(graph.tensors[op.outputs[0]].static_shape) - 1
            found = {1: 1}
        if op.op_type == "ScatterND":
            rows = shapes[op.inputs[2]][ax[2]]
            j = scatter_cut(graph, op, ax, rows, shapes[op.inputs[0]][land])
            found = {} if j is None else {1: j}
        for p, k in found.items():
            t = op.inputs[p]
            cut = _scaled(op, graph.tensors[t].static_shape, k, extent, new)
            copy = f"{t}__first{cut[k]}"
            cuts[i, p] = (t, copy, k, cut[k])
            shapes[copy] = cut
        for t in op.outputs:
            if t:
                axis[t] = land
                shapes[t] = _scaled(op, graph.tensors[t].static_shape, land, extent, new)
        if op.op_type in ("Reshape", "Expand"):
            targets[i] = np.asarray(shapes[op.outputs[0]], dtype=np.int64)
    return Shrink(axis, extent, new, shapes, targets, "", cuts)


def _walk_divisible(walk: Callable[[int], Shrink], extent: int, new: int) -> Shrink:
    """``walk`` (a :func:`_walk` given a row count) at ``new`` rows, or at the fewest rows
    above it that every tensor on the way scales to whole (a stride-2 convolution halves the
    rows: a crop of 56 image rows to 1 cannot halve, to 2 can). A row count of the whole
    ``extent`` is no shrink and never tried: that is the caller's full-size case, with its
    size limit."""
    first: NotShrinkable | None = None
    for more in [new, *(m for m in _divisor_rows(extent) if new < m < extent)][:_TRIES]:
        try:
            return walk(more)
        except _NotWhole as err:
            first = first or err
        except NotShrinkable as err:
            first = first or err
            break
    assert first is not None
    raise first


def _divisor_rows(extent: int) -> list[int]:
    """Row counts ``extent / q`` for each divisor ``q`` of ``extent``, fewest first."""
    small = [q for q in range(1, math.isqrt(extent) + 1) if extent % q == 0]
    return sorted({extent // q for q in small} | set(small))


def _tensors(graph: Graph, group: FusionGroup) -> list[str]:
    names = dict.fromkeys(group.inputs)
    for n in group.ops:
        names.update(dict.fromkeys(t for t in graph.op(n).outputs if t))
    return list(names)


def _has_features(graph: Graph, tensor: str) -> bool:
    return graph.tensors[tensor].dtype.startswith(("float", "bfloat"))


def _rows_of(graph: Graph, tensor: str) -> Shape:
    """The row axes of an activation: all but the feature (last) axis; all of an index."""
    shape = graph.tensors[tensor].static_shape
    return shape[:-1] if _has_features(graph, tensor) else shape


def _main_act(graph: Graph, group: FusionGroup) -> str | None:
    """The activation the group streams: the largest float input (else the largest index)."""
    acts = [t for t in group.inputs if not is_compile_time(graph, t)]
    acts = [t for t in acts if graph.tensors[t].is_static and graph.tensors[t].numel > 1]
    return max(acts, key=lambda t: (_has_features(graph, t), graph.tensors[t].numel), default=None)


def group_rows(graph: Graph, group: FusionGroup) -> int:
    """Rows the group works on: those of its main activation (all axes but the features),
    else of its largest output."""
    main = _main_act(graph, group)
    if main is not None:
        return max(1, math.prod(_rows_of(graph, main)))
    outs = [graph.tensors[t].static_shape for t in group.outputs if graph.tensors[t].is_static]
    return max(1, math.prod(max(outs, key=math.prod, default=())[:-1]))


def _contracted(graph: Graph, group: FusionGroup, tensor: str) -> bool:
    """Whether a matmul of the group contracts ``tensor``'s last axis (its A operand)."""
    return any(
        graph.op(n).op_type in ("MatMul", "Gemm") and graph.op(n).inputs[:1] == (tensor,)
        for n in group.ops
    )


def _grouped(d: int, extent: int, divisors: bool) -> bool:
    """Whether an axis of ``d`` may shrink with one of ``extent``: a multiple of it (the
    query heads of KV heads), and under ``divisors`` a divisor of it too (the KV heads of
    query heads: a crop of whole KV groups)."""
    if d == extent or d <= 1:
        return False
    return d % extent == 0 or (divisors and extent % d == 0)


def _track(
    graph: Graph,
    group: FusionGroup,
    acts: list[str],
    main: str,
    a: int,
    extent: int,
    mode: str,
) -> dict[str, int]:
    """Which axis of which activation input shrinks, under one tracking ``mode``."""
    if mode == "main":
        return {main: a}
    want = graph.tensors[main].static_shape
    tracked: dict[str, int] = {}
    for t in acts:
        shape = graph.tensors[t].static_shape
        if mode == "alike":
            if shape == want:
                tracked[t] = a
        elif a == 0:
            if shape[0] == extent:
                tracked[t] = 0
            elif shape[0] != 1:
                raise NotShrinkable(f"input {t} has {shape[0]} rows, not {extent}")
        else:
            rows = _rows_of(graph, t)
            k = next((k for k, d in enumerate(rows) if d == extent), None)
            if k is None and a < len(rows) and _grouped(rows[a], extent, mode == "grouped"):
                k = a  # the same axis, a multiple of it (or a divisor: grouped-query heads)
            last = shape[-1] if shape else 0
            # a projection's output: heads x head_dim, heads outer (never a matmul's K)
            heads = mode == "heads" and _has_features(graph, t) and last > extent
            if k is None and heads and last % extent == 0 and not _contracted(graph, group, t):
                k = len(shape) - 1
            if k is not None:
                tracked[t] = k
    return tracked


def plan_shrinks(
    graph: Graph, group: FusionGroup, rows: int
) -> tuple[bool, list[Shrink], list[str]]:
    """Ways to run ``group`` on about ``rows`` rows (each axis, each tracking mode).

    Returns:
        (needed, candidates, reasons): whether the group has more rows than asked, the
        consistent reductions found (each still to be checked by shape inference), and why
        the other choices were refused.
    """
    full = group_rows(graph, group)
    big = _main_act(graph, group)
    if full <= rows or big is None:
        return False, [], []
    acts = [t for t in group.inputs if not is_compile_time(graph, t)]
    acts = [t for t in acts if graph.tensors[t].is_static and graph.tensors[t].numel > 1]
    main = graph.tensors[big].static_shape
    axes = [a for a, d in enumerate(_rows_of(graph, big)) if d > 1]
    found: list[Shrink] = []
    reasons: list[str] = []
    tried: list[tuple[dict[str, int], bool]] = []
    # every activation with the axis; the same with the axes it is a multiple of (a
    # grouped-query attention's KV heads); the first with the features of an input that has
    # not (a projection's heads x head_dim, split into heads by a view in the group); those
    # shaped like the main one (Q and rotate_half(Q)); the main one alone (attention queries:
    # keys and values keep all their rows)
    for mode in ("all", "grouped", "heads", "alike", "main"):
        for a in axes:
            extent = main[a]
            new = max(1, min(extent - 1, round(rows * extent / full)))
            what = ("batch" if a == 0 else f"axis {a}") + {
                "all": "",
                "grouped": " (whole KV groups)",
                "heads": " (heads in the features)",
                "alike": " (alike inputs)",
                "main": f" of {big} only",
            }[mode]
            try:
                tracked = _track(graph, group, acts, big, a, extent, mode)
                if (tracked, mode == "heads") in tried:
                    continue
                tried.append((tracked, mode == "heads"))
                born = mode == "heads"
                walk = functools.partial(_walk, graph, group, tracked, extent, born=born)
                shrink = _walk_divisible(walk, extent, new)
            except NotShrinkable as err:
                reasons.append(f"{what}: {err}")
                continue
            new = shrink.new
            kept = full * new // extent
            note = f"{what} {extent} -> {new} ({full} -> {kept} rows)"
            found.append(replace(shrink, note=note, kept=kept))
    return True, found, reasons
