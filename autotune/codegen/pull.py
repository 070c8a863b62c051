"""Values of a group at an index: how every elementwise and layout op reads its inputs.

A kernel computes an output element by asking for it at the output's index; each op answers
by asking its inputs at the indices it reads (a transpose permutes the index, a slice shifts
it, a concat picks the piece the index falls in, a gather reads the index from a tensor), down
to loads of the group's inputs. The anchor ops of a template (a reduction, a matmul) are
answered by the template itself (``anchors``). Every expression is bound to a name once per
scope, so a value read twice at the same index is computed once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, add, broadcast_index, mul, offset, reshape_index
from autotune.codegen.scalar_ops import TRITON_DTYPES, cast_expr, elementwise, onnx_dtype
from autotune.codegen.source import Body, paren
from search_space.ir import Graph, Op

__all__ = ["Anchor", "KernelIO", "Lanes", "Pull", "lanes"]

_TL = re.compile(r"tl\.\w+|float\('-?inf'\)|float\('nan'\)|\.to\(|\d+\.?\d*(e[-+]?\d+)?")
_NAME = re.compile(r"[A-Za-z_]\w*")
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
Anchor = Callable[["Pull", Index, str], str]  # (pull, index, mask) -> the anchor's value


@dataclass(frozen=True)
class KernelIO:
    """What a kernel reads and writes: the group's input tensors as pointer parameters (in
    order), scalar constants written as literals, and its outputs."""

    graph: Graph
    ops: frozenset[str]
    params: Mapping[str, str]  # tensor -> parameter name
    literals: Mapping[str, str]  # tensor -> literal

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.graph.tensors[tensor].static_shape

    def dtype(self, tensor: str) -> str:
        return self.graph.tensors[tensor].dtype

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


class Pull:
    """Expressions of tensors at indices, emitted into one scope (``body``)."""

    def __init__(
        self, io: KernelIO, body: Body, lanes: Lanes, anchors: Mapping[str, Anchor] | None = None
    ):
        self.io, self.body, self.anchors = io, body, dict(anchors or {})
        self.memo: dict[tuple[str, Index, str], str] = {}
        self.lanes = lanes
        self.spans: dict[str, frozenset[str]] = dict(lanes.axes)

    def value(self, tensor: str, idx: Index, mask: str) -> str:
        key = (tensor, idx, mask)
        if key not in self.memo:
            expr = self._value(tensor, idx, mask)
            name = self.bind(expr)
            self.memo[key] = name
        return self.memo[key]

    def bind(self, expr: str, prefix: str = "t") -> str:
        name = self.body.bind(expr, prefix)
        self.spans.setdefault(name, self.span(expr))
        return name

    def span(self, expr: str) -> frozenset[str]:
        """The tile axes ``expr`` varies along (none: one value per program)."""
        out: set[str] = set()
        for n in _NAME.findall(_TL.sub("", expr)):
            out |= self.spans.get(n, frozenset())
        return frozenset(out)

    def _value(self, tensor: str, idx: Index, mask: str) -> str:
        io = self.io
        if tensor in io.literals:
            return io.literals[tensor]
        if tensor in self.anchors:
            return self.anchors[tensor](self, idx, mask)
        op = io.graph.producer(tensor)
        if tensor in io.params or op is None or op.name not in io.ops:
            return self.load(tensor, idx, mask)
        handler = _HANDLERS.get(op.op_type)
        if handler is not None:
            return handler(self, op, tensor, idx, mask)
        return self._elementwise(op, tensor, idx, mask)

    def load(self, tensor: str, idx: Index, mask: str) -> str:
        param = self.io.params.get(tensor)
        if param is None:
            raise Unsupported(f"'{tensor}' is read but is not an input of the kernel")
        off = offset(idx, self.io.shape(tensor))
        dtype = self.io.dtype(tensor)
        if not self.span(off):  # one address for the whole tile (a batch's element)
            text = f"tl.load({param} + {paren(off)})" if off != "0" else f"tl.load({param})"
        else:
            text = f"tl.load({self.pointer(param, off, mask)}, mask={mask}, other=0)"
        if dtype in ("float16", "bfloat16"):
            return f"{text}.to(tl.float32)"
        if dtype == "bool":
            return f"{text} != 0"
        if dtype not in TRITON_DTYPES:
            raise Unsupported(f"a tensor of type {dtype}")
        return text

    def pointer(self, param: str, off: str, mask: str) -> str:
        """``param + off``, broadcast to the mask's shape where the offset spans fewer axes
        (a store of a row statistic, a tensor with a dim of 1)."""
        ptr = param if off == "0" else f"{param} + {paren(off)}"
        need = self.span(mask)
        if not need <= self.span(off):
            ptr = f"{ptr} + {self.lanes.zeros(need)}"
        return ptr

    def _elementwise(self, op: Op, tensor: str, idx: Index, mask: str) -> str:
        shape = self.io.shape(tensor)
        operands = []
        for t in op.inputs:
            if not t:
                operands.append("")
                continue
            operands.append(self.value(t, broadcast_index(idx, shape, self.io.shape(t)), mask))
        return elementwise(op.op_type, operands, dict(op.attributes), self.io.dtype(tensor))

    def operand(self, op: Op, pos: int, idx: Index, mask: str) -> str:
        return self.value(op.inputs[pos], idx, mask)


Handler = Callable[[Pull, Op, str, Index, str], str]


def _view(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    src = op.inputs[0]
    return p.value(src, reshape_index(idx, p.io.shape(t), p.io.shape(src)), mask)


def _cast(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    src = op.inputs[0]
    to = onnx_dtype(int(op.attr("to"))) if op.op_type == "Cast" else p.io.dtype(op.inputs[1])
    return cast_expr(p.value(src, idx, mask), p.io.dtype(src), to)


def _transpose(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    src = op.inputs[0]
    rank = len(p.io.shape(src))
    perm = op.attr("perm") or list(reversed(range(rank)))
    res = ["0"] * rank
    for out_axis, in_axis in enumerate(perm):
        res[in_axis] = idx[out_axis]
    return p.value(src, tuple(res), mask)


def _expand(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    src = op.inputs[0]
    return p.value(src, broadcast_index(idx, p.io.shape(t), p.io.shape(src)), mask)


def _slice_params(p: Pull, op: Op) -> list[tuple[int, int, int]]:
    """(axis, start, step) per sliced axis, normalised as ONNX clamps them."""
    shape = p.io.shape(op.inputs[0])
    vals = [
        p.io.constant(op.inputs[i]).astype(np.int64).ravel().tolist()
        if len(op.inputs) > i and op.inputs[i]
        else None
        for i in range(1, 5)
    ]
    starts, _ends, axes, steps = vals
    axes = axes or list(range(len(starts or [])))
    steps = steps or [1] * len(axes)
    out = []
    for s, a, st in zip(starts or [], axes, steps, strict=True):
        a %= len(shape)
        d = shape[a]
        s = s + d if s < 0 else s
        s = min(max(s, 0), d if st > 0 else d - 1)
        out.append((a, s, st))
    return out


def _slice(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    res = list(idx)
    for axis, start, step in _slice_params(p, op):
        res[axis] = (
            add(str(start), mul(idx[axis], step))
            if step > 0
            else (f"{start} - {paren(mul(idx[axis], -step))}")
        )
    return p.value(op.inputs[0], tuple(res), mask)


def _concat(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    rank = len(p.io.shape(t))
    axis = int(op.attr("axis")) % rank
    pieces: list[tuple[str, str]] = []
    start = 0
    for src in op.inputs:
        size = p.io.shape(src)[axis]
        if size == 0:
            continue
        local = list(idx)
        local[axis] = add(idx[axis], str(-start)) if start else idx[axis]
        inside = f"({paren(idx[axis])} >= {start}) & ({paren(idx[axis])} < {start + size})"
        cond = p.bind(inside, "inside")
        pieces.append((cond, p.value(src, tuple(local), p.bind(f"{mask} & {cond}", "mask"))))
        start += size
    out = pieces[-1][1]
    for cond, val in reversed(pieces[:-1]):
        out = f"tl.where({cond}, {val}, {out})"
    return out


def _split(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    axis = int(op.attr("axis", 0)) % len(p.io.shape(t))
    before = 0
    for out in op.outputs:
        if out == t:
            break
        before += p.io.shape(out)[axis]
    res = list(idx)
    res[axis] = add(idx[axis], str(before)) if before else idx[axis]
    return p.value(op.inputs[0], tuple(res), mask)


def _gather(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    data, ind = op.inputs[0], op.inputs[1]
    dshape, ishape = p.io.shape(data), p.io.shape(ind)
    axis = int(op.attr("axis", 0)) % len(dshape)
    at = p.value(ind, tuple(idx[axis : axis + len(ishape)]), mask)
    d = dshape[axis]
    wrapped = p.body.bind(f"tl.where({at} < 0, {at} + {d}, {at})", "g")
    res = (*idx[:axis], wrapped, *idx[axis + len(ishape) :])
    return p.value(data, tuple(res), mask)


def _batchnorm(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    x = p.value(op.inputs[0], idx, mask)
    ch = (idx[1],) if len(idx) > 1 else ("0",)
    scale, bias, mean, var = (p.operand(op, i, ch, mask) for i in range(1, 5))
    eps = float(op.attr("epsilon", 1e-5))
    return f"({x} - {mean}) / tl.sqrt({var} + {eps!r}) * {scale} + {bias}"


def _dropout(p: Pull, op: Op, t: str, idx: Index, mask: str) -> str:
    if t != op.outputs[0]:
        raise Unsupported("Dropout's mask output")
    return p.value(op.inputs[0], idx, mask)


_HANDLERS: dict[str, Handler] = {
    **{v: _view for v in VIEWS},
    "Cast": _cast,
    "CastLike": _cast,
    "Transpose": _transpose,
    "Expand": _expand,
    "Slice": _slice,
    "Concat": _concat,
    "Split": _split,
    "Gather": _gather,
    "BatchNormalization": _batchnorm,
    "Dropout": _dropout,
}


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
