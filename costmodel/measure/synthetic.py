"""Synthetic one-pattern models for calibration: small, skinny, huge and misaligned shapes.

The zoo covers the shapes real networks use; these cover the corners a cost model must also get
right: matrices of 16 rows, GEMV-like skinny products, very large products, and extents that
are not multiples of 16 or of a 32-byte line. Each model is a tiny graph of one pattern
(matmul with an epilogue, an elementwise chain, a row reduction, a convolution).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from functools import partial

import onnx
from onnx import TensorProto

from search_space.zoo import BuildArgs, Builder

__all__ = ["synthetic_models"]

# (M, K, N): small, skinny (GEMV-like on either side), huge, misaligned
_MATMULS = (
    (16, 16, 16),
    (32, 64, 48),
    (64, 128, 64),
    (128, 256, 128),
    (1, 4096, 4096),
    (8, 1024, 4096),
    (4096, 4096, 8),
    (2048, 64, 2048),
    (4096, 4096, 4096),
    (8192, 1024, 8192),
    (16384, 4096, 1024),
    (512, 8192, 512),
    (1000, 1000, 1000),
    (77, 768, 3072),
    (4095, 1023, 17),
    (300, 513, 257),
    (2048, 2048, 50257),
    (6000, 1000, 24),
    (96, 96, 96),
    (1536, 640, 2560),
)
_ELEMENTWISE = ((7, 33), (1, 1000), (4096, 768), (8191,), (16, 128, 3072), (3, 5, 7, 11))
_ROWS = ((64, 7), (512, 128), (100, 1000), (4096, 1024), (8, 30522), (2048, 77))
# (N, C, H, W, out channels, kernel, stride, groups)
_CONVS = (
    (1, 3, 224, 224, 64, 7, 2, 1),
    (8, 64, 56, 56, 64, 3, 1, 1),
    (1, 17, 33, 33, 24, 3, 1, 1),
    (4, 96, 28, 28, 96, 3, 1, 96),
    (2, 256, 14, 14, 512, 1, 1, 1),
    (1, 5, 9, 9, 7, 1, 1, 1),
    (16, 128, 28, 28, 128, 3, 1, 1),
    (16, 512, 7, 7, 2048, 1, 1, 1),
    (4, 1024, 14, 14, 256, 1, 1, 1),
    (8, 256, 56, 56, 128, 1, 2, 1),
    (2, 48, 112, 112, 48, 3, 2, 1),
    (32, 64, 8, 8, 64, 3, 1, 1),
    (8, 160, 20, 20, 320, 3, 2, 1),
    (1, 1000, 1, 1, 100, 1, 1, 1),
    (8, 32, 64, 64, 32, 5, 1, 32),
)


def _builder(name: str) -> Builder:
    return Builder(BuildArgs(name, "inputs", 1.0, None, None, None, 0))


def _matmul(m: int, k: int, n: int, epilogue: str, dtype: int) -> onnx.ModelProto:
    b = _builder(f"mm_{m}x{k}x{n}_{epilogue}")
    x = b.input("x", (m, k), dtype)
    w = b.weight("w", (k, n)) if dtype == TensorProto.FLOAT else b.input("w", (k, n), dtype)
    y = b.op("MatMul", [x, w])
    if epilogue in ("bias", "bias_relu", "bias_tanh"):
        bias = (
            b.weight("bias", (n,)) if dtype == TensorProto.FLOAT else b.input("bias", (n,), dtype)
        )
        y = b.op("Add", [y, bias])
    if epilogue == "bias_relu":
        y = b.op("Relu", [y])
    if epilogue == "bias_tanh":
        y = b.op("Tanh", [y])
    if epilogue == "residual_norm":
        r = b.input("r", (m, n), dtype)
        y = b.op("Add", [y, r])
        mean = b.op("ReduceMean", [y], axes=[-1], keepdims=1)
        y = b.op("Sub", [y, mean])
    b.output(y, "y", (m, n), dtype)
    return b.model(family="synthetic", doc="synthetic matmul", extra={})


def _elementwise(shape: tuple[int, ...], length: int, dtype: int) -> onnx.ModelProto:
    b = _builder("ew_" + "x".join(map(str, shape)) + f"_{length}")
    x = b.input("x", shape, dtype)
    z = b.input("z", shape, dtype)
    y = b.op("Add", [x, z])
    for i in range(length - 1):
        y = b.op(("Mul", "Sigmoid", "Add", "Relu")[i % 4], [y, z] if i % 2 == 0 else [y])
    b.output(y, "y", shape, dtype)
    return b.model(family="synthetic", doc="synthetic elementwise chain", extra={})


def _rows(shape: tuple[int, int], pattern: str, dtype: int) -> onnx.ModelProto:
    b = _builder(f"rows_{shape[0]}x{shape[1]}_{pattern}")
    x = b.input("x", shape, dtype)
    if pattern == "softmax":
        y = b.op("Softmax", [x], axis=-1)
    elif pattern == "norm":
        mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
        d = b.op("Sub", [x, mean])
        var = b.op("ReduceMean", [b.op("Mul", [d, d])], axes=[-1], keepdims=1)
        y = b.op("Div", [d, b.op("Sqrt", [var])])
    else:
        y = b.op("ReduceSum", [x, b.const([-1], "axes")], keepdims=1)
        b.output(y, "y", (shape[0], 1), dtype)
        return b.model(family="synthetic", doc="synthetic row reduction", extra={})
    b.output(y, "y", shape, dtype)
    return b.model(family="synthetic", doc="synthetic row reduction", extra={})


def _conv(spec: tuple[int, ...], relu: bool) -> onnx.ModelProto:
    n, c, h, w, oc, k, s, groups = spec
    b = _builder(f"conv_{'x'.join(map(str, spec))}_{int(relu)}")
    x = b.input("x", (n, c, h, w))
    wt = b.weight("w", (oc, c // groups, k, k))
    pad = k // 2
    y = b.op("Conv", [x, wt], pads=[pad] * 4, strides=[s, s], group=groups)
    if relu:
        y = b.op("Relu", [y])
    oh = (h + 2 * pad - k) // s + 1
    ow = (w + 2 * pad - k) // s + 1
    b.output(y, "y", (n, oc, oh, ow))
    return b.model(family="synthetic", doc="synthetic convolution", extra={})


def synthetic_models(seed: int = 0) -> Iterator[tuple[str, onnx.ModelProto]]:
    """Every synthetic model as (name, model), in an order shuffled by ``seed``."""
    makers: list[Callable[[], onnx.ModelProto]] = []
    epilogues = ("none", "bias", "bias_relu", "bias_tanh", "residual_norm")
    for i, (m, k, n) in enumerate(_MATMULS):
        dtype = TensorProto.FLOAT16 if i % 3 == 2 else TensorProto.FLOAT
        for epi in (epilogues[i % len(epilogues)], "bias_relu"):
            makers.append(partial(_matmul, m, k, n, epi, dtype))
    for i, shape in enumerate(_ELEMENTWISE):
        dtype = TensorProto.FLOAT16 if i % 2 else TensorProto.FLOAT
        makers.append(partial(_elementwise, shape, 1 + i % 4, dtype))
    for i, shape in enumerate(_ROWS):
        for pattern in ("softmax", "norm", "sum"):
            dtype = TensorProto.FLOAT16 if (i + len(pattern)) % 3 == 0 else TensorProto.FLOAT
            makers.append(partial(_rows, shape, pattern, dtype))
    for i, spec in enumerate(_CONVS):
        makers.append(partial(_conv, spec, bool(i % 2)))
    random.Random(seed).shuffle(makers)
    for make in makers:
        model = make()
        yield model.graph.name, model
