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
from collections.abc import Callable, Mapping

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, broadcast_index, offset
from autotune.codegen.kernel_io import KernelIO, Lanes, lanes, literals_of
from autotune.codegen.layout import LAYOUT_HANDLERS
from autotune.codegen.scalar_ops import ELEMENTWISE, TRITON_DTYPES, elementwise
from autotune.codegen.scatter import SCATTER_HANDLERS
from autotune.codegen.source import Body, paren
from autotune.codegen.window import WINDOW_HANDLERS
from search_space.ir import Op

__all__ = ["Anchor", "KernelIO", "Lanes", "Pull", "lanes", "literals_of"]

# what a span ignores: tl functions, float literals, conversions and numbers (whole words, so
# the digits of a name such as t12 stay with it)
_TL = re.compile(r"tl\.\w+|float\('-?inf'\)|float\('nan'\)|\.to\(|\b\d+\.?\d*(e[-+]?\d+)?\b")
_NAME = re.compile(r"[A-Za-z_]\w*")
_HANDLERS = {**LAYOUT_HANDLERS, **WINDOW_HANDLERS, **SCATTER_HANDLERS}
Anchor = Callable[["Pull", Index, str], str]  # (pull, index, mask) -> the anchor's value


class Pull:
    """Expressions of tensors at indices, emitted into one scope (``body``)."""

    def __init__(
        self,
        io: KernelIO,
        body: Body,
        lanes: Lanes,
        anchors: Mapping[str, Anchor] | None = None,
        env: Mapping[str, np.ndarray] | None = None,
    ):
        self.io, self.body, self.anchors = io, body, dict(anchors or {})
        # exact values of lane variables where known (a paired tile's): pieces read statically
        self.env: Mapping[str, np.ndarray] = dict(env or {})
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
        if op.op_type not in ELEMENTWISE:
            if op.op_class.value == "cube":
                raise Unsupported(f"a {op.op_type} is read off its tile")
            raise Unsupported(f"no template computes {op.op_type} here")
        return self._elementwise(op, tensor, idx, mask)

    def load(self, tensor: str, idx: Index, mask: str) -> str:
        param = self.io.params.get(tensor)
        if param is None:
            raise Unsupported(f"'{tensor}' is read but is not an input of the kernel")
        off = offset(idx, self.io.shape(tensor))
        dtype = self.io.storage(tensor)
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

    def tile(self, tensor: str, idx: Index, mask: str) -> str:
        """``value`` broadcast to the mask's whole tile and zero outside the mask (a ``tl.dot``
        operand must be one, even where the tensor has a dim of 1 the tile spans)."""
        value = self.value(tensor, idx, mask)
        need = self.span(mask)
        if not need <= self.span(value):
            value = f"{value} + {self.lanes.zeros(need)}.to(tl.float32)"
        # zero where masked: a masked lane of a broadcast value or a computed prologue is not
        # zero by itself, and a dot would add it (a K of 1 read 16 times)
        return self.bind(f"tl.where({mask}, {value}, 0.0)")

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
