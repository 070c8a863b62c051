"""Shared pieces of lowering: byte sizes under a precision mode, vector op costs, grids."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from costmodel.spec import Target
from search_space.ir import Graph, Op, alias_root, is_compile_time, is_inplace_update

__all__ = [
    "InPlace",
    "VectorCost",
    "ceil_div",
    "ceil_to",
    "inplace_writes",
    "kv_ranges",
    "mem_itemsize",
    "pow2_choices",
    "vector_cost",
]

# Per-element vector passes over an op's data: (simple passes, slow passes). Slow passes
# (exp, div, sqrt, ...) run at ``vector_slow_op_rate`` of the 256 B/cycle unit.
_PASSES: dict[str, tuple[float, float]] = {
    "Exp": (0, 1),
    "Log": (0, 1),
    "Sqrt": (0, 1),
    "Reciprocal": (0, 1),
    "Div": (0, 1),
    "Pow": (1, 1),
    "Erf": (2, 1),
    "Tanh": (2, 1),
    "Sigmoid": (1, 1),
    "Sin": (1, 1),
    "Cos": (1, 1),
    "Softplus": (1, 2),
    "Mish": (2, 2),
    "Gelu": (4, 1),
    "HardSwish": (3, 0),
    "HardSigmoid": (2, 0),
    "Softmax": (3, 2),
    "LogSoftmax": (3, 2),
    "LayerNormalization": (6, 1),
    "RMSNormalization": (4, 1),
    "GroupNormalization": (6, 1),
    "InstanceNormalization": (6, 1),
    "BatchNormalization": (2, 0),
    "Transpose": (2, 0),
}
OPAQUE_PASSES = (4.0, 0.0)
MAX_REPEAT_BYTES = 255 * 256  # one vector instruction covers at most 255 repeats of 256 B


def ceil_div(a: int | np.ndarray, b: int | np.ndarray) -> np.ndarray:
    return -(-np.asarray(a) // np.asarray(b))


def ceil_to(a: int | np.ndarray, b: int) -> np.ndarray:
    return ceil_div(a, b) * b


def kv_ranges(t: int, split: int, tile: int) -> list[tuple[int, int]]:
    """The key ranges of a ``split``-way flash-decoding pass over ``t`` keys: contiguous, each
    a whole number of ``tile`` blocks (the last takes what is left); one range when ``split``
    <= 1. The attention lowering costs them; the kernel emulation computes them."""
    if split <= 1 or t <= 1:
        return [(0, t)]
    step = -(-t // split)
    if tile > 0:
        step = -(-step // tile) * tile
    return [(lo, min(t, lo + step)) for lo in range(0, t, step)]


def pow2_choices(limit: int, lo: int = 16, hi: int = 512) -> list[int]:
    """Powers of two in [lo, hi] up to the first one covering ``limit`` (so tiles can cover)."""
    out, v = [], lo
    while v <= hi:
        out.append(v)
        if v >= limit:
            break
        v *= 2
    return out


def mem_itemsize(graph: Graph, tensor: str, target: Target, *, cube_operand: bool = False) -> int:
    """Bytes per element of ``tensor`` in device memory under the target's precision.

    Weights feeding the cube are converted offline to the cube dtype; float activations live in
    the vector dtype (the model's own under ``auto``); integer tensors keep their size.
    """
    ten = graph.tensors[alias_root(graph, tensor)]
    if not ten.dtype.startswith(("float", "bfloat")):
        return ten.itemsize
    if cube_operand and is_compile_time(graph, tensor):
        return target.cube_itemsize(ten.itemsize)
    return target.vector_itemsize(ten.itemsize)


@dataclass(frozen=True)
class InPlace:
    """An in-place update (:func:`~search_space.ir.is_inplace_update`) as a lowering moves it.

    Attributes:
        buffer: the input it aliases, never streamed in.
        updates: the tensor whose elements it writes (the output stream's size).
        run: elements of one contiguous written slice (the indexed slice of the buffer).
    """

    buffer: str
    updates: str
    run: int


def inplace_writes(graph: Graph, ops: Iterable[Op]) -> dict[str, InPlace]:
    """The in-place updates among ``ops``, by output: a lowering streams neither the buffer in
    nor the whole of it out, only the updated slices (and the updates and indices in)."""
    out = {}
    for op in ops:
        if is_inplace_update(graph, op):
            shape = graph.tensors[op.inputs[0]].static_shape
            depth = graph.tensors[op.inputs[1]].static_shape[-1]
            out[op.outputs[0]] = InPlace(op.inputs[0], op.inputs[2], math.prod(shape[depth:]))
    return out


@dataclass(frozen=True)
class VectorCost:
    cycles: np.ndarray  # per tile
    instrs: np.ndarray  # per tile


def vector_cost(
    target: Target, op_bytes: Iterable[tuple[Op | str, np.ndarray]], opaque: bool = False
) -> VectorCost:
    """Vector cycles of a list of (op or op type, bytes it touches per tile) on one vector
    core."""
    spec = target.spec
    cycles: np.ndarray = np.zeros(1)
    instrs: np.ndarray = np.zeros(1)
    for op, nbytes in op_bytes:
        kind = op if isinstance(op, str) else op.op_type
        simple, slow = OPAQUE_PASSES if opaque else _PASSES.get(kind, (1.0, 0.0))
        passes = simple + slow / spec.vector_slow_op_rate
        per_instr = np.maximum(1, ceil_div(np.ceil(nbytes).astype(np.int64), MAX_REPEAT_BYTES))
        n = math.ceil(simple + slow) * per_instr
        cycles = cycles + passes * nbytes / spec.vector_bytes_per_cycle
        cycles = cycles + n * spec.vector_issue_cycles
        instrs = instrs + n
    return VectorCost(cycles, instrs)
