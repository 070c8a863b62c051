"""What a kernel reads and writes, its tile's lanes, and what an op handler may ask of the
value reader (:class:`Reader`, implemented by :class:`autotune.codegen.pull.Pull`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index
from autotune.verify.numerics import number_format
from costmodel.spec import cube_itemsize
from search_space.ir import Graph, Op

# the cube formats of autotune.verify.numerics as Triton's dtype names
_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}

__all__ = [
    "F16_MAX",
    "KernelIO",
    "Lanes",
    "Reader",
    "is_literal",
    "lanes",
    "literal",
    "literals_of",
    "storage_dtype",
]

F16_MAX = 65504.0  # float16's largest finite value
_LITERAL = re.compile(r"^\(?(-?\d+\.?\d*(e[-+]?\d+)?|float\('-?(inf|nan)'\))\)?$")


def is_literal(expr: str) -> bool:
    """Whether a generated expression is a Python number (``2.0``, ``float('-inf')``)."""
    return bool(_LITERAL.match(expr))


# the precision modes whose float tensors live in memory in 16 bits (Target.vector_itemsize)
_HALF_MEMORY = {"fp16": "float16", "mixed": "float16", "bf16": "bfloat16"}


def storage_dtype(dtype: str, precision: str) -> str:
    """The type a tensor declared ``dtype`` is stored in between and inside kernels under a
    precision mode, as the cost model sizes its bytes (``lower.common.mem_itemsize``): wider
    floats in 16 bits under ``fp16``, ``mixed`` (float16) and ``bf16`` (bfloat16), the
    model's own types under ``auto`` and ``fp32``; values are computed in float32 either way."""
    if dtype in ("float32", "float64") and precision in _HALF_MEMORY:
        return _HALF_MEMORY[precision]
    return dtype


@dataclass(frozen=True)
class KernelIO:
    """What a kernel reads and writes: the group's input tensors as pointer parameters (in
    order), scalar constants written as literals, and its outputs."""

    graph: Graph
    ops: frozenset[str]
    params: Mapping[str, str]  # tensor -> parameter name
    literals: Mapping[str, str]  # tensor -> literal
    precision: str = "auto"  # the plan's precision mode (costmodel.spec.PRECISIONS)

    def dot_dtype(self, *operands: str) -> str:
        """The format ``tl.dot`` takes these operands in, as the plan was costed (and safe
        mode's emulation ran it, ``Target.cube_itemsize`` and ``numerics.number_format``): half
        operands as they are; float32 ones in float16 (precision auto, fp16, mixed), bfloat16
        (bf16), or float32 only under precision fp32; integer and float64 operands in float32
        (a product of shape arithmetic must not round)."""
        dtypes = {self.dtype(t) for t in operands}
        for half in ("bfloat16", "float16"):
            if half in dtypes:
                return half
        if dtypes != {"float32"}:  # integers and float64 keep their values: float32 sums
            return "float32"
        return _DTYPE[number_format(cube_itemsize(self.precision, 4), self.precision)]

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.graph.tensors[tensor].static_shape

    def dtype(self, tensor: str) -> str:
        """The type the graph declares (what the ops compute, a Cast rounds to)."""
        return self.graph.tensors[tensor].dtype

    def storage(self, tensor: str) -> str:
        """The type the tensor is loaded and stored in (:func:`storage_dtype`)."""
        return storage_dtype(self.dtype(tensor), self.precision)

    def fit(self, tensor: str, value: str) -> str:
        """``value`` as ``tensor`` stores it: a finite float32 value narrowed to float16
        saturates at float16's largest finite value (a mask's float32 minimum stays a large
        negative, as fp16 inference writes it with float16's minimum, not an infinity that
        turns a fully masked row into NaN); infinities and NaN stay what they are."""
        if self.storage(tensor) != "float16" or self.dtype(tensor) == "float16":
            return value
        if is_literal(value):  # a number: saturated here (float('inf') and NaN stay)
            number = value.strip("()")
            f = float(number) if "(" not in number else math.inf
            big = math.isfinite(f) and abs(f) > F16_MAX
            return repr(math.copysign(F16_MAX, f)) if big else value
        clamped = f"tl.clamp({value}, -{F16_MAX}, {F16_MAX})"
        return f"tl.where(tl.abs({value}) < float('inf'), {clamped}, {value})"

    def constant(self, tensor: str) -> np.ndarray:
        value = self.graph.constants.get(tensor)
        if value is None:
            raise Unsupported(f"'{tensor}' is not a compile-time constant")
        return np.asarray(value)


@dataclass(frozen=True)
class Lanes:
    """The tile's lane variables: which tile axes each name spans (``m`` spans M, ``mask``
    spans M and N), and each axis's position and block size."""

    axes: Mapping[str, frozenset[str]]
    blocks: Mapping[str, tuple[int, str]]
    rank: int

    def zeros(self, axes: frozenset[str]) -> str:
        """A zero tile spanning ``axes`` (broadcasting an address to a mask's shape)."""
        shape = ["1"] * self.rank
        for a in axes:
            pos, block = self.blocks[a]
            shape[pos] = block
        return f"tl.zeros([{', '.join(shape)}], dtype=tl.int32)"

    def naming(self, **axes: str) -> Lanes:
        """These lanes, with more variables over their axes (``r="N"``)."""
        more = {name: frozenset(_axis_names(text, self.blocks)) for name, text in axes.items()}
        return Lanes({**self.axes, **more}, self.blocks, self.rank)


def lanes(blocks: Mapping[str, tuple[int, str]], **axes: str) -> Lanes:
    """Lanes from ``name="AXES"`` pairs (one letter per axis: ``mask="MN"``)."""
    rank = 1 + max(pos for pos, _ in blocks.values())
    spans = {name: frozenset(_axis_names(text, blocks)) for name, text in axes.items()}
    return Lanes(spans, dict(blocks), rank)


def _axis_names(text: str, blocks: Mapping[str, tuple[int, str]]) -> list[str]:
    out, rest = [], text
    for name in sorted(blocks, key=len, reverse=True):
        if name in rest:
            out.append(name)
            rest = rest.replace(name, "")
    return out


class Reader(Protocol):
    """The value reader as op handlers see it."""

    io: KernelIO
    lanes: Lanes
    env: Mapping[str, np.ndarray]  # lanes' values where known exactly (a paired tile's)

    def value(self, tensor: str, idx: Index, mask: str) -> str: ...

    def bind(self, expr: str, prefix: str = "t") -> str: ...

    def operand(self, op: Op, pos: int, idx: Index, mask: str) -> str: ...


def literal(value: Any, dtype: str) -> str:
    """A one-element constant as a Triton literal (floats widened to the compute type)."""
    v = np.asarray(value).ravel()[0]
    if dtype == "bool":
        return "1" if bool(v) else "0"
    if dtype.startswith(("float", "bfloat")):
        f = float(v)
        if f != f:
            return "float('nan')"
        if f in (float("inf"), float("-inf")):
            return "float('inf')" if f > 0 else "float('-inf')"
        return repr(f)
    return str(int(v))


def literals_of(graph: Graph, tensors: Sequence[str]) -> dict[str, str]:
    """The one-element compile-time constants among ``tensors``, as literals."""
    out = {}
    for t in tensors:
        value = graph.constants.get(t)
        if value is not None and np.asarray(value).size == 1:
            out[t] = literal(value, graph.tensors[t].dtype)
    return out
