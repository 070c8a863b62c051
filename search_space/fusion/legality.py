"""Structural legality of a group (docs/fusion.md): convex, at most one cube anchor (or the
attention or horizontal template), per-element prologues, reductions along the row axis, no
forbidden op, at most ``max_fused_ops`` ops. Buffer feasibility is the caller's callback."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

from search_space.fusion.kernel_graph import KernelGraph, Verdict, is_cube
from search_space.ir import Graph, Op, OpClass, alias_root, reduction_axes

__all__ = ["REDUCE_ROW", "check", "is_connected", "is_convex", "legal"]

REDUCE_ROW = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceSumSquare",
        "ReduceL2",
        "ReduceL1",
        "ReduceProd",
        "ReduceLogSumExp",
        "RMSNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "ArgMax",
        "ArgMin",
        "CumSum",
        "LpNormalization",
    }
)


def legal(kg: KernelGraph, ops: frozenset[str]) -> bool:
    """Whether ``ops`` may be one kernel (:func:`check`), remembered on ``kg`` (its graph never
    changes): a study's repairs ask about the same merges many thousand times."""
    memo = kg.legal_memo
    got = memo.get(ops)
    if got is None:
        if len(memo) >= 1_000_000:  # a bound on memory, far above a study's needs
            memo.clear()
        got = memo[ops] = check(kg, ops).ok
    return got


def check(kg: KernelGraph, ops: Iterable[str]) -> Verdict:
    """Structural legality of a set of kernel ops (feasibility is the caller's callback)."""
    members = frozenset(ops)
    g = kg.graph
    if len(members) > kg.max_fused_ops:
        return Verdict(False, f"more than max_fused_ops={kg.max_fused_ops} ops")
    mops = [g.op(n) for n in sorted(members, key=kg.index.__getitem__)]
    for op in mops:
        if not kg.fusible(op) and len(members) > 1:
            return Verdict(False, f"{op.op_type} '{op.name}' never fuses")
    if len(members) == 1:
        return Verdict(True)
    if not is_connected(kg, members):
        return Verdict(False, "ops are not connected")
    if not is_convex(kg, members):
        return Verdict(False, "not convex: a path leaves the group and re-enters it")
    cubes = [op for op in mops if is_cube(op)]
    if len(cubes) > 1:
        return _multi_anchor(kg, members, mops, cubes)
    if cubes:
        return _anchored(kg, members, mops, cubes[0])
    return _rows(g, mops, None)


def is_connected(kg: KernelGraph, members: frozenset[str]) -> bool:
    """Connected by edges, or by sibling matmuls reading one activation (horizontal)."""
    comps = kg.components(members)
    if len(comps) == 1:
        return True
    g = kg.graph
    heads: set[str] = set()
    for comp in comps:
        roots = {
            alias_root(g, g.op(n).inputs[0])
            for n in comp
            if is_cube(g.op(n)) and g.op(n).unit == "cube"
        }
        if not roots:
            return False
        heads |= roots
    return len(heads) == 1


def is_convex(kg: KernelGraph, members: frozenset[str]) -> bool:
    """No path leaves the set and re-enters it (checked only up to the last member)."""
    last = max(kg.index[n] for n in members)
    frontier = deque(m for n in members for m in kg.succ[n] if m not in members)
    seen = set(frontier)
    while frontier:
        n = frontier.popleft()
        for m in kg.succ[n]:
            if m in members:
                return False
            if m not in seen and kg.index[m] < last:
                seen.add(m)
                frontier.append(m)
    return True


def _anchored(kg: KernelGraph, members: frozenset[str], mops: list[Op], anchor: Op) -> Verdict:
    """One cube anchor: per-element prologues before it, epilogues on its output rows."""
    g = kg.graph
    after = kg.descendants(anchor.name, members)
    before = kg.ancestors(anchor.name, members)
    for op in mops:
        if op is anchor:
            continue
        if op.name in before:
            if op.op_class is not OpClass.ELEMENTWISE and not op.is_view:
                return Verdict(False, f"prologue {op.op_type} is not per-element")
            if op.name in after:
                return Verdict(False, "op both feeds and follows the anchor")
        elif op.name not in after:
            return Verdict(
                False,
                f"{op.op_type} '{op.name}' is neither prologue nor epilogue of the anchor",
            )
    out = g.tensors[anchor.outputs[0]]
    return _rows(g, [g.op(n) for n in after], out.static_shape[-1] if out.shape else None)


def _rows(g: Graph, mops: Sequence[Op], row: int | None) -> Verdict:
    """Every reduction reduces the same trailing extent: the group's row axis."""
    extents = set()
    for op in mops:
        if op.op_type not in REDUCE_ROW or not op.inputs[0]:
            continue
        shape = g.tensors[op.inputs[0]].static_shape
        extent = _trailing_extent(op, shape, g)
        if extent is None:
            return Verdict(False, f"{op.op_type} does not reduce the row (last) axis")
        extents.add(extent)
    if len(extents) > 1:
        return Verdict(False, "reductions over different row lengths")
    if row is not None and extents and extents != {row}:
        return Verdict(False, "epilogue reduction does not run along the output rows")
    return Verdict(True)


def _multi_anchor(
    kg: KernelGraph, members: frozenset[str], mops: list[Op], cubes: list[Op]
) -> Verdict:
    """Two or more cube ops: only the attention and horizontal templates."""
    g = kg.graph
    has_softmax = any(op.op_type in ("Softmax", "LogSoftmax") for op in mops)
    if len(cubes) == 2 and has_softmax:
        qk, pv = cubes
        if qk.name not in kg.ancestors(pv.name, members):
            return Verdict(False, "attention: PV does not follow QK^T")
        mid = kg.descendants(qk.name, members) & kg.ancestors(pv.name, members)
        if not any(g.op(n).op_type in ("Softmax", "LogSoftmax") for n in mid):
            return Verdict(False, "attention: no softmax between QK^T and PV")
        if any(is_cube(g.op(n)) for n in mid):
            return Verdict(False, "attention: a third matmul inside")
        if kg.descendants(pv.name, members):
            return Verdict(False, "attention: ops after PV")
        return _rows(g, [g.op(n) for n in mid], None)
    roots = {alias_root(g, c.inputs[0]) for c in cubes}
    if len(roots) != 1 or any(op.op_type not in ("MatMul", "Gemm") for op in cubes):
        return Verdict(False, "more than one cube anchor")
    if not all(kg.compile_time(c.inputs[1]) for c in cubes):
        return Verdict(False, "horizontal: a matmul's B operand is not a weight")
    for c in cubes:
        if kg.descendants(c.name, members) & {x.name for x in cubes}:
            return Verdict(False, "horizontal: one matmul feeds another")
    for op in mops:
        if is_cube(op):
            continue
        if not any(op.name in kg.descendants(c.name, members) for c in cubes):
            return Verdict(False, "horizontal: prologues are not supported")
    return Verdict(True)


def _trailing_extent(op: Op, shape: tuple[int, ...], g: Graph) -> int | None:
    """The row length a reduction reduces, if it reduces trailing axes; else None."""
    if not shape:
        return 1
    axes = reduction_axes(op.op_type, dict(op.attributes), op.inputs, shape, g.constants, g.opset)
    if list(axes) != list(range(len(shape) - len(axes), len(shape))):
        return None
    return math.prod(shape[a] for a in axes)
