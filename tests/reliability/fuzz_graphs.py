"""Hypothesis strategy for random valid ONNX models of the ops the tool fuses (issue 23).

``graphs()`` draws a model of 1..8 nodes that compute (Constants aside): static small shapes,
float32 inputs (float16 sometimes, and Casts between the two), weights as initializers, a DAG
with fan-out and sometimes several outputs, opsets 11 to 23, and sometimes as older exporters
write it (Constant nodes, initializers listed as inputs, no node names). Every value carries
an interval holding it for any input in [-5, 5] (N(0, 1) draws, as ``verify`` and the tests
feed), so no op meets an argument outside its domain (Sqrt, Log, Reciprocal, divisors and
the like read values shifted to >= 0.5 first: ``x + c``) and no value grows past what its type
holds comfortably; the numerics stay meaningful.

The values and the builder are :mod:`fuzz_builder`; the op families :mod:`fuzz_ops`
(elementwise, reductions, cube ops), :mod:`fuzz_layout` (views and data movement) and
:mod:`fuzz_extra` (the less common ops); this module draws the inputs and runs the loop.
"""

from __future__ import annotations

import math

import fuzz_extra as more
import fuzz_layout as lay
import fuzz_ops as ops
import numpy as np
import onnx
from fuzz_builder import MAX_NODES, MAX_NUMEL, Builder, Draw, Shape
from hypothesis import strategies as st
from onnx import TensorProto as T

# the tool reads 9 and up; LayerNormalization from 17, Gelu 20, RMSNormalization 23
OPSETS = (11, 12, 13, 17, 18, 20, 21, 23)
# name -> (lowest opset, family). Hypothesis favours the ends of a list: cheap ops sit there.
FAMILIES: dict[str, tuple[int, ops.Family]] = {
    "unary": (11, ops.unary),
    "softmax": (11, ops.softmax),
    "matmul": (11, ops.matmul),
    "reduce": (11, ops.reduce),
    "cast": (11, ops.cast),
    "conv": (11, ops.conv),
    "transpose": (11, lay.transpose),
    "layer_norm": (17, ops.layer_norm),
    "gather": (11, lay.gather),
    "gemm": (11, ops.gemm),
    "reshape": (11, lay.reshape),
    "batch_norm": (11, ops.batch_norm),
    "join": (11, lay.join),
    "grow": (11, lay.grow),
    "pool": (11, ops.pool),
    "activation": (11, more.activation),
    "reduce_more": (11, more.reduce_more),
    "norm": (11, more.norm),
    "variadic": (11, more.variadic),
    "conv_transpose": (11, more.conv_transpose),
    "pool_more": (11, more.pool_more),
    "scan": (11, more.scan),
    "where": (11, ops.where),
    "power": (11, ops.power),
    "binary": (11, ops.binary),
}


def _input_shape(draw: Draw) -> Shape:
    rank = draw(st.integers(2, 4))
    dims = st.sampled_from([1, 2, 3, 4, 5, 7, 8, 16, 32, 64])
    shape = [draw(dims) for _ in range(rank)]
    while math.prod(shape) > MAX_NUMEL // 4:
        shape[shape.index(max(shape))] //= 2
    return tuple(shape)


def _second_shape(draw: Draw, shape: Shape) -> Shape:
    """A shape broadcasting against ``shape``: the same, a suffix, or some dims made 1."""
    kind = draw(st.sampled_from(["same", "suffix", "ones"]))
    if kind == "suffix":
        return shape[draw(st.integers(1, len(shape) - 1)) :]
    if kind == "ones":
        return tuple(1 if draw(st.booleans()) else d for d in shape)
    return shape


@st.composite
def graphs(draw: Draw, max_nodes: int = MAX_NODES) -> onnx.ModelProto:
    """A random valid model of 1..``max_nodes`` nodes (see the module docstring)."""
    opset = draw(st.sampled_from(OPSETS))
    b = Builder(opset, np.random.default_rng(draw(st.integers(0, 2**32 - 1))))
    elem = draw(st.sampled_from([T.FLOAT, T.FLOAT, T.FLOAT, T.FLOAT16]))
    first = b.input(_input_shape(draw), elem)
    if draw(st.integers(0, 2)) == 0:
        second = _second_shape(draw, first.shape)
        b.input(second, draw(st.sampled_from([elem, T.FLOAT])))
    budget = draw(st.integers(1, max_nodes) | st.integers(max_nodes // 2, max_nodes))
    families = [f for f, (low, _) in FAMILIES.items() if opset >= low]
    while len(b.nodes) < budget:
        room = budget - len(b.nodes)
        v = b.pool[-1] if draw(st.booleans()) else draw(st.sampled_from(b.pool))
        for _ in range(4):
            made = FAMILIES[draw(st.sampled_from(families))][1](draw, b, v, room)
            if made is not None:
                break
        else:
            ops.fallback(b, v)
    return b.model(draw)
