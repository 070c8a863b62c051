"""Layout and indexing ops of the PyTorch fallback, which move or select values without
computing new ones: reshapes (Reshape, Flatten, Squeeze, Unsqueeze), Split, Slice, the Gather
and Scatter families, Pad, DepthToSpace and SpaceToDepth, Expand, Tile, Transpose, Concat, and
Shape and Size. Indices read as ONNX reads them (negative ones count from the end), and Slice
and Pad clamp and crop as onnxruntime does.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from autotune.codegen.extern.common import (
    Args,
    Attrs,
    OpFn,
    Result,
    Tensor,
    choice,
    resolve_axis,
)


def _wrap(index: Tensor, size: Tensor | int) -> Tensor:
    """Negative indices counted from the end, as ONNX Gather and Scatter read them."""
    index = index.long()
    return torch.where(index < 0, index + size, index)


def _reshape(a: Attrs, x: Args, n: int) -> Result:
    data, shape = x[0], x.ints(1) or []
    if not a.get("allowzero", 0):  # 0 copies the input's dim
        shape = [data.size(i) if v == 0 else v for i, v in enumerate(shape)]
    return data.reshape(shape)


def _unsqueeze(a: Attrs, x: Args, n: int) -> Result:
    data, axes = x[0], x.ints(1) or a.get("axes", [])
    for axis in sorted(resolve_axis(v, data.dim() + len(axes)) for v in axes):
        data = data.unsqueeze(axis)
    return data


def _split(a: Attrs, x: Args, n: int) -> Result:
    data = x[0]
    axis, sizes = resolve_axis(a.get("axis", 0), data.dim()), x.ints(1) or a.get("split")
    if sizes is None:  # equal parts, the last one smaller (opset 18 num_outputs)
        sizes = -(-data.size(axis) // a.get("num_outputs", n))
    return tuple(torch.split(data, sizes, axis))


def _slice_index(start: int, end: int, step: int, size: int) -> range:
    """Slice clamping as onnxruntime does it: ONNX's, which differs from Python's for a negative
    step, and an end of INT32_MAX or INT64_MAX runs to the end in the step's direction."""
    if end in (2**31 - 1, 2**63 - 1):
        end = size if step > 0 else -size - 1
    start, end = start + size if start < 0 else start, end + size if end < 0 else end
    if step > 0:
        return range(min(max(start, 0), size), min(max(end, 0), size), step)
    return range(min(max(start, 0), size - 1), min(max(end, -1), size - 1), step)


def _slice(a: Attrs, x: Args, n: int) -> Result:
    data, starts, ends = x[0], x.ints(1) or [], x.ints(2) or []
    axes, steps = x.ints(3) or range(len(starts)), x.ints(4) or [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        dim = resolve_axis(axis, data.dim())
        index = _slice_index(start, end, step, data.size(dim))
        data = data.index_select(dim, torch.tensor(index, dtype=torch.long, device=data.device))
    return data


def _gather(a: Attrs, x: Args, n: int) -> Result:
    data, axis = x[0], resolve_axis(a.get("axis", 0), x[0].dim())
    index = _wrap(x[1], data.size(axis))
    out = data.index_select(axis, index.reshape(-1))
    return out.reshape(*data.shape[:axis], *index.shape, *data.shape[axis + 1 :])


def _gather_elements(a: Attrs, x: Args, n: int) -> Result:
    axis = resolve_axis(a.get("axis", 0), x[0].dim())
    return torch.gather(x[0], axis, _wrap(x[1], x[0].size(axis)))


def _gather_nd(a: Attrs, x: Args, n: int) -> Result:
    data, index, b = x[0], x[1], a.get("batch_dims", 0)
    k, batch = index.size(-1), math.prod(data.shape[:b])
    sizes = torch.tensor(data.shape[b : b + k], device=data.device)
    flat = _wrap(index.reshape(batch, -1, k), sizes)
    rows = torch.arange(batch, device=data.device).reshape(-1, 1)
    out = data.reshape(batch, *data.shape[b:])[(rows, *flat.unbind(-1))]
    return out.reshape(*index.shape[:-1], *data.shape[b + k :])


_SCATTER = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}  # ONNX -> torch


def _scatter_nd(a: Attrs, x: Args, n: int) -> Result:
    data, index, k = x[0].clone(), x[1], x[1].size(-1)
    reduction = choice(a, "reduction", "none", {"none", *_SCATTER})
    dev = data.device
    strides = torch.tensor([math.prod(data.shape[j + 1 : k]) for j in range(k)], device=dev)
    sizes = torch.tensor(data.shape[:k], device=dev)
    # ``data`` as a matrix with a row per index tuple; ``rows`` are the tuples as row numbers.
    rows = (_wrap(index.reshape(-1, k), sizes) * strides).sum(-1)
    flat = data.view(math.prod(data.shape[:k]), math.prod(data.shape[k:]))
    values = x[2].reshape(rows.size(0), flat.size(1))
    if reduction == "none":
        flat.index_copy_(0, rows, values)
    else:
        rows = rows.unsqueeze(1).expand_as(values)
        flat.scatter_reduce_(0, rows, values, _SCATTER[reduction])
    return data


def _scatter_elements(a: Attrs, x: Args, n: int) -> Result:
    data, axis = x[0], resolve_axis(a.get("axis", 0), x[0].dim())
    index = _wrap(x[1], data.size(axis))
    reduction = choice(a, "reduction", "none", {"none", *_SCATTER})
    if reduction == "none":
        return data.scatter(axis, index, x[2])
    return data.scatter_reduce(axis, index, x[2], _SCATTER[reduction])


def _pad_index(mode: str, size: int, begin: int, end: int, device: torch.device) -> Tensor:
    """Rows of one axis that reflect / edge / wrap padding reads."""
    i = torch.arange(-begin, size + end, device=device)
    if mode == "edge":
        return i.clamp(0, size - 1)
    if mode == "wrap":
        return i.remainder(size)
    period = max(2 * (size - 1), 1)  # reflect: the edge row is not repeated
    i = i.remainder(period)
    return torch.where(i >= size, period - i, i)


def _pad(a: Attrs, x: Args, n: int) -> Result:
    data, mode = x[0], choice(a, "mode", "constant", {"constant", "reflect", "edge", "wrap"})
    pads = x.ints(1) or a.get("pads", [])
    axes = [resolve_axis(v, data.dim()) for v in x.ints(3) or range(data.dim())]
    pairs = list(zip(axes, pads[: len(axes)], pads[len(axes) :], strict=True))
    if mode == "constant":
        value = a.get("value", 0.0) if x.opt(2) is None else x[2].item()
        flat = [0] * (2 * data.dim())
        for axis, begin, end in pairs:
            flat[2 * (data.dim() - 1 - axis) : 2 * (data.dim() - axis)] = [begin, end]
        return F.pad(data, flat, value=value)
    for axis, begin, end in pairs:  # as onnxruntime: negative pads crop first, then pad
        data = data.narrow(axis, max(-begin, 0), data.size(axis) - max(-begin, 0) - max(-end, 0))
        index = _pad_index(mode, data.size(axis), max(begin, 0), max(end, 0), data.device)
        data = data.index_select(axis, index)
    return data


def _depth_to_space(a: Attrs, x: Args, n: int) -> Result:
    (b, c, h, w), s = x[0].shape, a["blocksize"]
    if choice(a, "mode", "DCR", {"DCR", "CRD"}) == "DCR":
        y = x[0].reshape(b, s, s, c // s**2, h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x[0].reshape(b, c // s**2, s, s, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(b, c // s**2, h * s, w * s)


def _space_to_depth(a: Attrs, x: Args, n: int) -> Result:
    (b, c, h, w), s = x[0].shape, a["blocksize"]
    y = x[0].reshape(b, c, h // s, s, w // s, s).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(b, c * s * s, h // s, w // s)


def _flatten(a: Attrs, x: Args, n: int) -> Result:
    axis = resolve_axis(a.get("axis", 1), x[0].dim())
    return x[0].reshape(math.prod(x[0].shape[:axis]), math.prod(x[0].shape[axis:]))


def _squeeze(a: Attrs, x: Args, n: int) -> Result:
    axes = x.ints(1) or a.get("axes") or range(x[0].dim())  # no axes: every dim of size 1
    return x[0].squeeze(tuple(resolve_axis(v, x[0].dim()) for v in axes))


def _int64(like: Tensor, value: Any) -> Tensor:
    return torch.tensor(value, dtype=torch.int64, device=like.device)


# The layout and indexing ops of the fallback: ONNX op type -> op function.
LAYOUT_OPS: dict[str, OpFn] = {
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": lambda a, x, n: x[0].permute(tuple(a.get("perm", reversed(range(x[0].dim()))))),
    "Concat": lambda a, x, n: torch.cat(x.given(), a["axis"]),
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "Expand": lambda a, x, n: x[0].expand(torch.broadcast_shapes(x[0].shape, x.ints(1) or [])),
    "Tile": lambda a, x, n: x[0].repeat(x.ints(1) or []),
    "Pad": _pad,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "ScatterND": _scatter_nd,
    "ScatterElements": _scatter_elements,
    "Shape": lambda a, x, n: _int64(x[0], x[0].shape[a.get("start", 0) : a.get("end")]),
    "Size": lambda a, x, n: _int64(x[0], x[0].numel()),
}
