"""Matmul, Gemm and batched matmul with their prologue and epilogue chains.

Each program takes output tiles ``pid, pid + NPROG, ...`` of ``TILE_M x TILE_N`` elements (the
plan's L1 block, ``base_m x base_n``), over every batch; a tile accumulates ``TILE_K``-deep
slices of its operands (``base_k``) in float32 with ``tl.dot``. An operand is read through the
ops that make it inside the group (a transpose, a cast, a rotary embedding), and every output
is computed from the accumulator by the epilogue's ops (bias, activation, residual, cast) at
the tile's own elements; an epilogue that reads the product off its tile is refused.
"""

from __future__ import annotations

import math

import numpy as np

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import (
    Index,
    broadcast_index,
    numel,
    offset,
    same_index,
    unflatten,
)
from autotune.codegen.pull import KernelIO, Pull, lanes
from autotune.codegen.source import Body
from autotune.codegen.templates.common import (
    KernelSource,
    Launch,
    check_outputs,
    header,
    kernel_io,
    next_pow2,
    store,
)
from search_space.ir import FusionGroup, Graph, KernelConfig, Op

__all__ = ["MATMULS", "matmul_kernel"]

MATMULS = frozenset({"MatMul", "Gemm"})
LANES = lanes(
    {"M": (0, "BLOCK_M"), "N": (1, "BLOCK_N"), "KA": (1, "BLOCK_K"), "KB": (0, "BLOCK_K")},
    m="M",
    n="N",
    mmask="M",
    nmask="N",
    mask="MN",
    ka="KA",
    kb="KB",
    amask="MKA",
    bmask="KBN",
)
META = ("NPROG", "TILE_M", "BLOCK_M", "TILE_N", "BLOCK_N", "TILE_K", "BLOCK_K")


class _Product:
    """The matmul of a group: its dims and how its operands and result are indexed."""

    def __init__(self, op: Op, io: KernelIO):
        self.op, self.io = op, io
        self.out = op.outputs[0]
        a, b = io.shape(op.inputs[0]), io.shape(op.inputs[1])
        if len(a) < 2 or len(b) < 2:
            raise Unsupported("a matmul of a vector")
        self.ta = bool(op.attr("transA", 0)) if op.op_type == "Gemm" else False
        self.tb = bool(op.attr("transB", 0)) if op.op_type == "Gemm" else False
        shape = io.shape(self.out)
        self.batch, (self.M, self.N) = shape[:-2], shape[-2:]
        self.K = a[-2] if self.ta else a[-1]
        if (b[-1] if self.tb else b[-2]) != self.K:
            raise Unsupported(f"matmul inner dims {a} x {b}")
        self.nb = math.prod(self.batch)

    def bidx(self) -> Index:
        return unflatten("b", self.batch)

    def a_index(self) -> Index:
        a = self.io.shape(self.op.inputs[0])
        mk = ("ka", "m") if self.ta else ("m", "ka")
        return broadcast_index(self.bidx(), self.batch, a[:-2]) + _ones(mk, a[-2:])

    def b_index(self) -> Index:
        b = self.io.shape(self.op.inputs[1])
        kn = ("n", "kb") if self.tb else ("kb", "n")
        return broadcast_index(self.bidx(), self.batch, b[:-2]) + _ones(kn, b[-2:])

    def out_index(self, shape: tuple[int, ...]) -> Index:
        """The index of the tile's element (b, m, n) in a tensor of the product's size."""
        if shape[-2:] == (self.M, self.N) and math.prod(shape[:-2]) == self.nb:
            return unflatten("b", shape[:-2]) + _ones(("m", "n"), shape[-2:])
        flat = f"b * {self.M * self.N} + m * {self.N} + n"
        return unflatten(flat, shape)

    def env(self) -> dict[str, np.ndarray]:
        def pick(n: int) -> np.ndarray:
            return np.unique(np.linspace(0, n - 1, min(n, 61)).astype(np.int64))

        return {
            "b": pick(self.nb)[:, None, None],
            "m": pick(self.M)[None, :, None],
            "n": pick(self.N)[None, None, :],
        }

    def result(self, pull: Pull, idx: Index, mask: str) -> str:
        """The product at ``idx`` of its output: the accumulator, with Gemm's alpha and C."""
        if not same_index(idx, self.out_index(self.io.shape(self.out)), self.env()):
            raise Unsupported("the epilogue reads the product off its tile")
        value = "acc"
        if self.op.op_type == "Gemm":
            alpha, beta = float(self.op.attr("alpha", 1.0)), float(self.op.attr("beta", 1.0))
            value = f"acc * {alpha!r}" if alpha != 1.0 else value
            if len(self.op.inputs) > 2 and self.op.inputs[2] and beta != 0.0:
                c = self.op.inputs[2]
                cv = pull.value(c, broadcast_index(idx, (self.M, self.N), self.io.shape(c)), mask)
                value = f"{value} + {beta!r} * {cv}" if beta != 1.0 else f"{value} + {cv}"
        return value


def _ones(names: tuple[str, str], dims: tuple[int, ...]) -> Index:
    return tuple("0" if d == 1 else n for n, d in zip(names, dims, strict=True))


def _operand(pull: Pull, tensor: str, idx: Index, mask: str) -> str:
    value = pull.value(tensor, idx, mask)
    dtype = pull.io.dtype(tensor)
    if dtype in ("float16", "bfloat16"):  # the cube reads half operands as they are
        return f"{value}.to(tl.{dtype})"
    return value


def _k_loop(prod: _Product, io: KernelIO, row: Body) -> None:
    row.line("acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)")
    inner = row.child()
    inner.line("ka = k0 + lane_k[None, :]")
    inner.line("kb = k0 + lane_k[:, None]")
    inner.line(f"amask = mmask & (lane_k[None, :] < TILE_K) & (ka < {prod.K})")
    inner.line(f"bmask = nmask & (lane_k[:, None] < TILE_K) & (kb < {prod.K})")
    pull = Pull(io, inner, LANES)
    a = _operand(pull, prod.op.inputs[0], prod.a_index(), "amask")
    b = _operand(pull, prod.op.inputs[1], prod.b_index(), "bmask")
    precision = ', input_precision="ieee"' if io.dtype(prod.op.inputs[0]) == "float32" else ""
    inner.line(f"acc = tl.dot({a}, {b}, acc{precision})")
    row.nest(f"for k0 in range(0, {prod.K}, TILE_K):", inner)


def _tile_vars(prod: _Product, row: Body, tiles_m: int, tiles_n: int) -> None:
    row.line(f"b = tile // {tiles_m * tiles_n}")
    row.line(f"tm = (tile // {tiles_n}) % {tiles_m}")
    row.line(f"tn = tile % {tiles_n}")
    row.line("lane_m = tl.arange(0, BLOCK_M)")
    row.line("lane_n = tl.arange(0, BLOCK_N)")
    row.line("lane_k = tl.arange(0, BLOCK_K)")
    row.line("m = tm * TILE_M + lane_m[:, None]")
    row.line("n = tn * TILE_N + lane_n[None, :]")
    row.line(f"mmask = (lane_m[:, None] < TILE_M) & (m < {prod.M})")
    row.line(f"nmask = (lane_n[None, :] < TILE_N) & (n < {prod.N})")
    row.line("mask = mmask & nmask")


def _tiles(config: KernelConfig, prod: _Product) -> tuple[int, int, int]:
    tm = max(1, min(config.base_m or config.m or 16, prod.M))
    tn = max(1, min(config.base_n or config.n or 16, prod.N))
    tk = max(1, min(config.base_k or config.k or 16, prod.K))
    return tm, tn, tk


def matmul_kernel(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig
) -> KernelSource:
    """The kernel of a group around one MatMul or Gemm.

    Raises:
        Unsupported: a matmul of a vector, an output not of the product's size, an epilogue
            that reads the product off its tile, or an op no template computes.
    """
    check_outputs(graph, group.outputs)
    io = kernel_io(graph, group)
    op = next(graph.op(o) for o in group.ops if graph.op(o).op_type in MATMULS)
    prod = _Product(op, io)
    for t in group.outputs:
        if numel(io.shape(t)) != prod.nb * prod.M * prod.N:
            raise Unsupported(f"output '{t}' is not of the product's size")
    tm, tn, tk = _tiles(config, prod)
    tiles_m, tiles_n = math.ceil(prod.M / tm), math.ceil(prod.N / tn)
    body = Body(1)
    row = body.child()
    _tile_vars(prod, row, tiles_m, tiles_n)
    _k_loop(prod, io, row)
    pull = Pull(io, row, LANES, {prod.out: prod.result})
    for pos, t in enumerate(group.outputs):
        idx = prod.out_index(io.shape(t))
        value = pull.value(t, idx, "mask")
        ptr = pull.pointer(f"out{pos}", offset(idx, io.shape(t)), "mask")
        row.line(store(ptr, io.dtype(t), value, "mask"))
    tiles = prod.nb * tiles_m * tiles_n
    body.nest(f"for tile in range(pid, {tiles}, NPROG):", row)
    grid = max(1, min(config.block_dim, tiles))
    launch = Launch(
        grid=grid,
        constexprs=(
            ("NPROG", grid),
            ("TILE_M", tm),
            ("BLOCK_M", _block(tm)),
            ("TILE_N", tn),
            ("BLOCK_N", _block(tn)),
            ("TILE_K", tk),
            ("BLOCK_K", _block(tk)),
        ),
        num_stages=2 if config.double_buffer else 1,
    )
    lines = header(name, group, graph, config, io, group.outputs, META, "matmul")
    return KernelSource(
        name,
        "\n".join([*lines, *body.lines]),
        group.ops,
        tuple(io.params),
        group.outputs,
        launch,
        "matmul",
    )


def _block(tile: int) -> int:
    """Lanes for a tile: a power of two, and at least 16 (``tl.dot``'s smallest shape)."""
    return max(16, next_pow2(tile))
