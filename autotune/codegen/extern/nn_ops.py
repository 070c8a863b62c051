"""Windowed and product ops of the PyTorch fallback: the pools (max, average, global), Conv and
ConvTranspose, and the matrix products (MatMul, Gemm, Einsum). A pool or Conv node's windows are
resolved, ``auto_pad`` included, into explicit pads per spatial dim; a pool then cuts the padded
input into windows and reduces them, which is how ceil mode and ``count_include_pad`` follow
onnxruntime.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from autotune.codegen.extern.common import (
    Args,
    Attrs,
    ExternError,
    OpFn,
    Result,
    Tensor,
    choice,
)


@dataclass(frozen=True)
class _Window:
    """One spatial dim of a pooling or convolution window, with its explicit pads."""

    k: int
    s: int
    d: int
    begin: int
    end: int

    def out(self, size: int, ceil: bool) -> int:
        span = size + self.begin + self.end - (self.k - 1) * self.d - 1
        out = (-(-span // self.s) if ceil else span // self.s) + 1
        # As onnxruntime and PyTorch: in ceil mode no window starts in the end padding.
        return out - 1 if ceil and (out - 1) * self.s >= size + self.begin else out


def _same_pads(auto: str, size: int, k: int, s: int, d: int) -> tuple[int, int]:
    total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
    small, large = total // 2, total - total // 2
    return (small, large) if auto == "SAME_UPPER" else (large, small)


def _windows(a: Attrs, spatial: Sequence[int], kernel: Sequence[int], pool: bool) -> list[_Window]:
    """The windows of a Conv or pool node, ``auto_pad`` resolved into explicit pads."""
    r = len(spatial)
    strides, dil = a.get("strides", [1] * r), a.get("dilations", [1] * r)
    auto = choice(a, "auto_pad", "NOTSET", {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"})
    if auto.startswith("SAME"):
        # onnxruntime sizes a pool's SAME pads by the undilated kernel (ONNX: the dilated one).
        same = zip(spatial, kernel, strides, [1] * r if pool else dil, strict=True)
        pads = [_same_pads(auto, *v) for v in same]
    else:
        flat = a.get("pads", [0] * 2 * r) if auto == "NOTSET" else [0] * 2 * r
        pads = list(zip(flat[:r], flat[r:], strict=True))
    return [_Window(*v[:3], *v[3]) for v in zip(kernel, strides, dil, pads, strict=True)]


def _pad_dim(x: Tensor, dim: int, begin: int, end: int, value: float) -> Tensor:
    return F.pad(x, [0, 0] * (x.dim() - 1 - dim) + [begin, end], value=value)


def _unfold(x: Tensor, wins: list[_Window], ceil: bool, fill: float, overflow: float) -> Tensor:
    """``x`` padded with ``fill`` (then, in ceil mode, with ``overflow`` where windows run past
    the pads) and cut into windows: (N, C, *out, *kernel)."""
    outs = [w.out(x.size(dim), ceil) for dim, w in enumerate(wins, start=2)]
    for dim, w in enumerate(wins, start=2):
        x = _pad_dim(x, dim, w.begin, w.end, fill)
    for dim, (w, out) in enumerate(zip(wins, outs, strict=True), start=2):
        extra = max((out - 1) * w.s + (w.k - 1) * w.d + 1 - x.size(dim), 0)
        x = _pad_dim(x, dim, 0, extra, overflow)  # after all the pads: corners are overflow
        x = x.unfold(dim, (w.k - 1) * w.d + 1, w.s)[..., :: w.d].narrow(dim, 0, out)
    return x


def _max_pool(a: Attrs, x: Args, n: int) -> Result:
    if n > 1:
        raise ExternError("output 1 (Indices) is not supported")
    data, ceil = x[0], bool(a.get("ceil_mode", 0))
    wins = _windows(a, data.shape[2:], a["kernel_shape"], pool=True)
    low = -math.inf if data.is_floating_point() else torch.iinfo(data.dtype).min
    return _unfold(data, wins, ceil, low, low).amax(list(range(-len(wins), 0)))


def _average_pool(a: Attrs, x: Args, n: int) -> Result:
    data, ceil = x[0], bool(a.get("ceil_mode", 0))
    wins = _windows(a, data.shape[2:], a["kernel_shape"], pool=True)
    dims = list(range(-len(wins), 0))
    # The divisor counts the pads if count_include_pad, never the ceil-mode overflow.
    ones = torch.ones((1, 1, *data.shape[2:]), dtype=data.dtype, device=data.device)
    count = _unfold(ones, wins, ceil, float(a.get("count_include_pad", 0)), 0.0).sum(dims)
    return _unfold(data, wins, ceil, 0.0, 0.0).sum(dims) / count


def _conv(a: Attrs, x: Args, n: int) -> Result:
    data, weight = x[0], x[1]
    wins = _windows(a, data.shape[2:], weight.shape[2:], pool=False)
    data = F.pad(data, [p for w in reversed(wins) for p in (w.begin, w.end)])
    conv = (F.conv1d, F.conv2d, F.conv3d)[len(wins) - 1]
    strides, dil = [w.s for w in wins], [w.d for w in wins]
    return conv(data, weight, x.opt(2), strides, 0, dil, a.get("group", 1))


def _conv_transpose(a: Attrs, x: Args, n: int) -> Result:
    data, weight, r = x[0], x[1], x[0].dim() - 2
    choice(a, "auto_pad", "NOTSET", {"NOTSET"})
    choice(a, "output_shape", None, {None})
    strides, dil = a.get("strides", [1] * r), a.get("dilations", [1] * r)
    pads, extra = a.get("pads", [0] * 2 * r), a.get("output_padding", [0] * r)
    conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[r - 1]
    y = conv(data, weight, None, strides, 0, 0, a.get("group", 1), dil)
    # Crop the pads; output_padding adds rows no input reaches (zero, then the bias).
    y = F.pad(y, [c for i in reversed(range(r)) for c in (-pads[i], extra[i] - pads[r + i])])
    return y if x.opt(2) is None else y + x[2].reshape(1, -1, *[1] * r)


def _gemm(a: Attrs, x: Args, n: int) -> Result:
    lhs = x[0].T if a.get("transA", 0) else x[0]
    rhs = x[1].T if a.get("transB", 0) else x[1]
    y = a.get("alpha", 1.0) * (lhs @ rhs)
    return y if x.opt(2) is None else y + a.get("beta", 1.0) * x[2]


# The pooling, convolution and matrix-product ops of the fallback: ONNX op type -> op function.
NN_OPS: dict[str, OpFn] = {
    "GlobalAveragePool": lambda a, x, n: x[0].mean(list(range(2, x[0].dim())), keepdim=True),
    "GlobalMaxPool": lambda a, x, n: x[0].amax(list(range(2, x[0].dim())), keepdim=True),
    "MaxPool": _max_pool,
    "AveragePool": _average_pool,
    "MatMul": lambda a, x, n: torch.matmul(x[0], x[1]),
    "Gemm": _gemm,
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "Einsum": lambda a, x, n: torch.einsum(a["equation"], *x.given()),
}
