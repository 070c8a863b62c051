"""The products a cube kernel accumulates: MatMul and Gemm, and Conv as an implicit GEMM.

A product is a batch of ``M x N`` results, each a ``K``-long dot product. The template asks a
product where its operands' elements lie for the tile's ``(b, m, ka)`` and ``(kb, n)`` lanes,
and where its result lies for ``(b, m, n)``. A convolution's M runs over images and output
pixels, its N over a group's output channels, its K over a group's input channels times the
kernel window; its batch is the group (so grouped and depthwise convolutions are batches of
small GEMMs), and the operand A is the input read through the window (im2col, never stored).
"""

from __future__ import annotations

import math

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import (
    Index,
    add,
    broadcast_index,
    lane_index,
    mul,
    offset,
    same_index,
    sample,
    substitute,
    unflatten,
)
from autotune.codegen.kernel_io import KernelIO, Reader
from autotune.codegen.window import window_pads
from search_space.ir import Op

__all__ = ["PRODUCTS", "Conv", "MatMul", "Product", "product"]

PRODUCTS = frozenset({"MatMul", "Gemm", "Conv"})


class Product:
    """What every product says about itself (see the module docstring)."""

    op: Op
    io: KernelIO
    out: str
    batch: tuple[int, ...]
    M: int
    N: int
    K: int
    acc: str = "acc"
    # a paired tile's pass (``templates.rotary``): the columns its lanes hold, and the shift
    # and accumulator of the partner columns the other half holds
    columns: np.ndarray | None = None
    partner: tuple[int, str] | None = None
    # the placement's guards of the output being written: the tile's elements it holds
    # (a product's slice after a Squeeze drops the dim that said which slice)
    guards: tuple[str, ...] = ()

    @property
    def nb(self) -> int:
        return math.prod(self.batch)

    @property
    def a(self) -> str:
        return self.op.inputs[0]

    @property
    def b(self) -> str:
        return self.op.inputs[1]

    def a_index(self) -> Index:
        raise NotImplementedError

    def a_guard(self) -> list[str]:
        """Conditions under which A's element exists (a convolution's padding)."""
        return []

    def b_index(self) -> Index:
        raise NotImplementedError

    def out_index(self, shape: tuple[int, ...]) -> Index:
        raise NotImplementedError

    def env(self) -> dict[str, np.ndarray]:
        n = sample(self.N) if self.columns is None else self.columns
        return {
            "b": sample(self.nb)[:, None, None],
            "m": sample(self.M)[None, :, None],
            "n": n[None, None, :],
        }

    def accumulator(self, idx: Index) -> str:
        """The accumulator holding the product at ``idx``: the tile's own, or in a paired
        tile's pass the partner's.

        Raises:
            Unsupported: ``idx`` is neither.
        """
        own = self.out_index(self.io.shape(self.out))
        if same_index(idx, own, self.env(), self.guards):
            return self.acc
        if self.partner is not None:
            shift, acc = self.partner
            partner = substitute(own, "n", add("n", str(shift)))
            if same_index(idx, partner, self.env(), self.guards):
                return acc
        raise Unsupported("the epilogue reads the product off its tile")

    def result(self, pull: Reader, idx: Index, mask: str) -> str:
        """The product at ``idx`` of its output (the accumulator, plus any bias)."""
        raise NotImplementedError

    def flat_index(self, shape: tuple[int, ...]) -> Index:
        """The element (b, m, n) of a tensor of the product's size but another shape."""
        own = self.out_index(self.io.shape(self.out))
        return unflatten(offset(own, self.io.shape(self.out)), shape)


class MatMul(Product):
    """MatMul (batched, numpy broadcasting of batch dims) and Gemm (transA/B, alpha, C)."""

    def __init__(self, op: Op, io: KernelIO):
        self.op, self.io, self.out = op, io, op.outputs[0]
        a, b = io.shape(op.inputs[0]), io.shape(op.inputs[1])
        if len(a) < 2 or len(b) < 2:
            raise Unsupported("a matmul of a vector")
        gemm = op.op_type == "Gemm"
        self.ta = bool(op.attr("transA", 0)) if gemm else False
        self.tb = bool(op.attr("transB", 0)) if gemm else False
        shape = io.shape(self.out)
        self.batch, (self.M, self.N) = shape[:-2], shape[-2:]
        self.K = a[-2] if self.ta else a[-1]
        if (b[-1] if self.tb else b[-2]) != self.K:
            raise Unsupported(f"matmul inner dims {a} x {b}")

    def a_index(self) -> Index:
        a = self.io.shape(self.a)
        mk = ("ka", "m") if self.ta else ("m", "ka")
        return broadcast_index(unflatten("b", self.batch), self.batch, a[:-2]) + lane_index(
            mk, a[-2:]
        )

    def b_index(self) -> Index:
        b = self.io.shape(self.b)
        kn = ("n", "kb") if self.tb else ("kb", "n")
        return broadcast_index(unflatten("b", self.batch), self.batch, b[:-2]) + lane_index(
            kn, b[-2:]
        )

    def out_index(self, shape: tuple[int, ...]) -> Index:
        if shape[-2:] == (self.M, self.N) and math.prod(shape[:-2]) == self.nb:
            return unflatten("b", shape[:-2]) + lane_index(("m", "n"), shape[-2:])
        return unflatten(f"b * {self.M * self.N} + m * {self.N} + n", shape)

    def result(self, pull: Reader, idx: Index, mask: str) -> str:
        value = self.accumulator(idx)
        if self.op.op_type != "Gemm":
            return value
        alpha, beta = float(self.op.attr("alpha", 1.0)), float(self.op.attr("beta", 1.0))
        value = f"{value} * {alpha!r}" if alpha != 1.0 else value
        if len(self.op.inputs) > 2 and self.op.inputs[2] and beta != 0.0:
            c = self.op.inputs[2]
            cv = pull.value(c, broadcast_index(idx, (self.M, self.N), self.io.shape(c)), mask)
            value = f"{value} + {beta!r} * {cv}" if beta != 1.0 else f"{value} + {cv}"
        return value


class Conv(Product):
    """Conv (1-D to 3-D; groups, strides, dilations, padding) as an implicit GEMM."""

    def __init__(self, op: Op, io: KernelIO):
        self.op, self.io, self.out = op, io, op.outputs[0]
        x, w, y = io.shape(op.inputs[0]), io.shape(op.inputs[1]), io.shape(self.out)
        self.groups = int(op.attr("group", 1))
        self.window = tuple(w[2:])
        nd = len(self.window)
        self.strides = list(op.attr("strides") or [1] * nd)
        self.dil = list(op.attr("dilations") or [1] * nd)
        self.pads = window_pads(op, x[2:], y[2:], self.window)[0]
        self.images, self.cig, self.cog = x[0], w[1], w[0] // self.groups
        self.sin, self.sout = x[2:], y[2:]
        self.batch = (self.groups,)
        self.M, self.N = self.images * math.prod(self.sout), self.cog
        self.K = self.cig * math.prod(self.window)

    def _pixel(self) -> Index:
        return unflatten("m", (self.images, *self.sout))

    def _positions(self) -> list[str]:
        taps = unflatten("ka", (self.cig, *self.window))[1:]
        out = self._pixel()[1:]
        return [
            add(mul(o, s), add(mul(k, d), str(-p)) if p else mul(k, d))
            for o, s, k, d, p in zip(out, self.strides, taps, self.dil, self.pads, strict=True)
        ]

    def a_index(self) -> Index:
        ci = unflatten("ka", (self.cig, *self.window))[0]
        channel = add(mul("b", self.cig), ci) if self.groups > 1 else ci
        return (self._pixel()[0], channel, *self._positions())

    def a_guard(self) -> list[str]:
        return [
            f"({q} >= 0) & ({q} < {d})" for q, d in zip(self._positions(), self.sin, strict=True)
        ]

    def b_index(self) -> Index:
        co = add(mul("b", self.cog), "n") if self.groups > 1 else "n"
        return (co, *unflatten("kb", (self.cig, *self.window)))

    def out_index(self, shape: tuple[int, ...]) -> Index:
        own = self.io.shape(self.out)
        pix = self._pixel()
        canonical = (pix[0], add(mul("b", self.cog), "n") if self.groups > 1 else "n", *pix[1:])
        if shape == own:
            return canonical
        return self.flat_index(shape)

    def result(self, pull: Reader, idx: Index, mask: str) -> str:
        acc = self.accumulator(idx)
        if len(self.op.inputs) > 2 and self.op.inputs[2]:
            return f"{acc} + {pull.value(self.op.inputs[2], (idx[1],), mask)}"
        return acc


def product(op: Op, io: KernelIO) -> Product:
    """The product of a MatMul, Gemm or Conv op."""
    if op.op_type == "Conv":
        return Conv(op, io)
    return MatMul(op, io)
