"""onnx's reference AveragePool, vectorised: the same output, bit for bit.

onnx's ``pool`` loops in Python over every output position, gathers the window's values in
row-major order (dropping the NaN it padded with when padding does not count) and takes
``np.average`` of them. Here the windows of one shape are gathered at once into a contiguous
array whose last axis is the window, and summed along it: numpy sums each row as it sums a
window on its own (the same pairwise order, float16 in float32), and the mean is that sum
over the count, rounded to the input's type as ``np.average`` rounds it. Pads, output shapes
and the windows' pixels come from onnx's own helpers and loops over one axis at a time, so
its quirks (pads read from ``pads`` for the window bounds, from the extra pads for the
padding) are kept. What this does not cover (not 2-D, NaN in the input, an empty window, a
window onnx would index out of range) runs onnx's own implementation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.ops.op_pool_common import (
    CommonPool,
    get_output_shape_auto_pad,
    get_output_shape_explicit_padding,
    get_pad_shape,
    get_pad_with_auto_pad,
)

__all__ = ["AveragePool", "is_2d_pool"]

_AUTO = ("SAME_UPPER", "SAME_LOWER", "VALID")


class AveragePool(CommonPool):
    """onnx's AveragePool at every opset, 2-D pooling of NaN-free input in numpy."""

    def _run(  # type: ignore[override]
        self,
        x: np.ndarray,
        auto_pad: Any = None,
        ceil_mode: Any = None,
        dilations: Any = None,
        kernel_shape: Any = None,
        pads: Any = None,
        strides: Any = None,
        count_include_pad: Any = None,
    ) -> Any:
        if self.run_params.get("opsets", {}).get("", 99) < 7:
            count_include_pad = None  # AveragePool-1 has no such attribute: onnx passes None
        args = {
            "auto_pad": auto_pad,
            "ceil_mode": ceil_mode,
            "dilations": dilations,
            "kernel_shape": kernel_shape,
            "pads": pads,
            "strides": strides,
        }
        fast = (
            is_2d_pool(x, kernel_shape)
            and x.dtype in (np.float16, np.float32, np.float64)
            and (pads is None or len(pads) == 4)
            and (not strides or len(strides) == 2)
            and (dilations is None or len(dilations) == 2)
            and not bool(np.isnan(x).any())
        )
        y = _pool(x, count_include_pad, **args) if fast else None
        if y is None:
            return CommonPool._run(self, "AVG", count_include_pad, x, **args)
        return (y,)


def is_2d_pool(x: Any, kernel_shape: Any) -> bool:
    """Is this a pooling of an ``[N, C, H, W]`` array over its two spatial axes (what the
    vectorised pools here and in :mod:`.pooling` cover, before their own conditions)?"""
    return (
        isinstance(x, np.ndarray)
        and x.ndim == 4
        and kernel_shape is not None
        and len(kernel_shape) == 2
    )


def _pool(x: np.ndarray, count_include_pad: Any, **args: Any) -> np.ndarray | None:
    """What ``CommonPool._run(self, "AVG", ...)`` returns, or None where it is not done here."""
    auto_pad, kernel, strides = args["auto_pad"], args["kernel_shape"], args["strides"]
    shape = x.shape
    if auto_pad in _AUTO:
        if args["ceil_mode"] not in (None, 0):
            return None  # onnx asserts
        out_shape = get_output_shape_auto_pad(auto_pad, shape[2:], kernel, strides)
        pad_shape = get_pad_shape(auto_pad, shape[2:], kernel, strides, out_shape)
        pads = required = get_pad_with_auto_pad(auto_pad, pad_shape)
    else:
        pads = args["pads"]
        out_shape, required = get_output_shape_explicit_padding(
            pads, shape[2:], kernel, strides, args["dilations"], args["ceil_mode"]
        )
    nan_pad = count_include_pad == 0  # onnx pads with NaN and drops it from the average
    padded = np.pad(
        x,
        ((0, 0), (0, 0), (required[0], required[2]), (required[1], required[3])),
        mode="constant",
        constant_values=np.nan if nan_pad else 0,
    )
    dilations = args["dilations"] if args["dilations"] is not None else [1, 1]
    pads = [0, 0, 0, 0] if pads is None else pads
    axes = []
    for i in range(2):  # per axis: each output's pixels, as onnx's pool lists them
        window = 1 + (kernel[i] - 1) * dilations[i]
        step = strides[i] if strides else 1
        count = int((shape[i + 2] + required[i] + required[i + 2] - window) / step + 1)
        bound = shape[i + 2] + pads[i] + pads[2 + i]
        if count > out_shape[i]:
            return None  # onnx would write past its output
        pixels = [
            [p for p in range(step * o, step * o + window, dilations[i]) if p < bound]
            for o in range(count)
        ]
        if any(p >= padded.shape[i + 2] for ps in pixels for p in ps):
            return None  # onnx would index past its padded input
        if nan_pad:  # the padding is NaN: only pixels of the input count
            lo, hi = required[i], required[i] + shape[i + 2]
            pixels = [[p for p in ps if lo <= p < hi] for ps in pixels]
        if not all(pixels):
            return None  # an empty window: onnx's average warns and gives NaN
        axes.append(pixels)
    y = np.zeros([shape[0], shape[1], *out_shape], dtype=padded.dtype)
    for rows, cols in _blocks(axes[0], axes[1]):
        ih = np.array([axes[0][o] for o in rows])
        iw = np.array([axes[1][o] for o in cols])
        vals = padded[:, :, ih[:, None, :, None], iw[None, :, None, :]]
        # each window's values in row-major order, one contiguous row per window: numpy
        # sums such a row as np.average sums the window alone (pairwise, in that order)
        vals = np.ascontiguousarray(vals.reshape(*vals.shape[:4], -1))
        total = vals.sum(axis=-1, dtype=np.float32 if padded.dtype == np.float16 else None)
        mean = total.astype(np.float64) / vals.shape[-1]
        y[:, :, np.array(rows)[:, None], np.array(cols)[None, :]] = mean.astype(padded.dtype)
    return y


def _blocks(h: list[list[int]], w: list[list[int]]) -> list[tuple[list[int], list[int]]]:
    """Output rows and columns whose windows have one size: (rows, cols) per pair of sizes."""
    by_h: dict[int, list[int]] = {}
    by_w: dict[int, list[int]] = {}
    for o, ps in enumerate(h):
        by_h.setdefault(len(ps), []).append(o)
    for o, ps in enumerate(w):
        by_w.setdefault(len(ps), []).append(o)
    return [(rows, cols) for rows in by_h.values() for cols in by_w.values()]
