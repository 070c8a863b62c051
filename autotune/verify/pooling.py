"""A vectorised MaxPool and AveragePool for onnx's reference evaluator (its own loops over
every window in Python took most of safe mode's time on CNNs: 46 of 136 s of one 12-trial
inception-v1 study for MaxPool, 44 of 73 s of an inception-v2 one for AveragePool), and a
GlobalMaxPool (onnx 1.23's reduces the wrong axes unless it pools over two: [N, C, L] came
out [N, 1]).

``ReferenceEvaluator(model, new_ops=FAST_OPS)`` uses them; every case the MaxPool does not
cover (dilations, auto_pad, the Indices output, pooling over other than two axes) goes to
onnx's own implementation, and the tests hold the two equal on the cases it does. The
AveragePool is onnx's own, windows and all, bit for bit (:mod:`.avgpool`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_max_pool import MaxPool as _ReferenceMaxPool

from autotune.verify.avgpool import AveragePool, is_2d_pool

__all__ = ["FAST_OPS", "AveragePool", "GlobalMaxPool", "MaxPool"]


def _out_len(size: int, k: int, s: int, lo: int, hi: int, ceil_mode: bool) -> int:
    span = (size + lo + hi - k) / s
    n = (math.ceil(span) if ceil_mode else math.floor(span)) + 1
    if ceil_mode and (n - 1) * s >= size + lo:  # a window must start inside input + pad
        n -= 1
    return n


class MaxPool(_ReferenceMaxPool):
    """onnx's MaxPool, with 2-D pooling (explicit pads, strides, ceil_mode) in numpy."""

    def _run(  # type: ignore[override]
        self,
        x: np.ndarray,
        auto_pad: Any = None,
        ceil_mode: Any = None,
        dilations: Any = None,
        kernel_shape: Any = None,
        pads: Any = None,
        storage_order: Any = None,
        strides: Any = None,
    ) -> Any:
        fast = (
            is_2d_pool(x, kernel_shape)
            and auto_pad in (None, "", "NOTSET")
            and (dilations is None or all(d == 1 for d in dilations))
            and len(self.output) == 1
            and x.dtype.kind == "f"
        )
        if not fast:
            return super()._run(
                x,
                auto_pad=auto_pad,
                ceil_mode=ceil_mode,
                dilations=dilations,
                kernel_shape=kernel_shape,
                pads=pads,
                storage_order=storage_order,
                strides=strides,
            )
        kh, kw = (int(k) for k in kernel_shape)
        sh, sw = (int(s) for s in strides) if strides else (1, 1)
        top, left, bottom, right = (int(p) for p in pads) if pads else (0, 0, 0, 0)
        h, w = x.shape[2], x.shape[3]
        oh = _out_len(h, kh, sh, top, bottom, bool(ceil_mode))
        ow = _out_len(w, kw, sw, left, right, bool(ceil_mode))
        need_h, need_w = (oh - 1) * sh + kh, (ow - 1) * sw + kw
        padded = np.pad(
            x,
            ((0, 0), (0, 0), (top, max(0, need_h - h - top)), (left, max(0, need_w - w - left))),
            constant_values=-np.inf,
        )
        windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
        y = windows[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw].max(axis=(-2, -1))
        return (y.astype(x.dtype, copy=False),)


class GlobalMaxPool(OpRun):
    """onnx's GlobalMaxPool, over every axis after the channels whatever the rank."""

    def _run(self, x: np.ndarray) -> Any:
        return (np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True),)


FAST_OPS: list[type[OpRun]] = [MaxPool, GlobalMaxPool, AveragePool]
