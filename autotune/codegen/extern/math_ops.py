"""Math on values, as the PyTorch fallback runs it: elementwise ops of one, two or any number of
inputs (Cast, Where and Mod among them), reductions and arg-reductions, CumSum, softmax and the
normalizations (batch, layer, group, instance, RMS, Lp), Clip, Dropout at inference, Trilu,
and the ops that make values rather than transform them (Range, ConstantOfShape). Integer Div
and integer ReduceMean truncate toward zero, as onnxruntime computes them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from autotune.codegen.extern.common import (
    DTYPES,
    Args,
    Attrs,
    ExternError,
    OpFn,
    Result,
    Tensor,
    choice,
    resolve_axis,
)


def _div(a: Tensor, b: Tensor) -> Tensor:
    # Integer Div truncates toward zero in onnxruntime (C division), not floor as numpy does.
    return a / b if a.is_floating_point() else torch.div(a, b, rounding_mode="trunc")


def _isinf(x: Tensor, a: Attrs) -> Tensor:
    pos = torch.isposinf(x) & bool(a.get("detect_positive", 1))
    return pos | (torch.isneginf(x) & bool(a.get("detect_negative", 1)))


_SELU = (1.67326319217681884765625, 1.05070102214813232421875)  # ONNX default alpha, gamma
# Elementwise ops of one input; torch.round rounds half to even, as ONNX Round does.
_SAME_NAME = (
    "Sqrt Reciprocal Neg Abs Exp Log Relu Sigmoid Tanh Erf Floor Ceil Round Sign Sin Cos Tan Asin"
    " Acos Atan Sinh Cosh"
)
# Elementwise ops of one input and no attributes: op type -> torch function.
_PLAIN: dict[str, Callable[[Tensor], Tensor]] = {
    **{op: getattr(torch, op.lower()) for op in _SAME_NAME.split()},
    "Not": torch.logical_not,
    "IsNaN": torch.isnan,
    "Identity": lambda x: x,
    "Softplus": F.softplus,
    "Softsign": F.softsign,
    "Mish": F.mish,
    "HardSwish": F.hardswish,
}
# Elementwise ops of one input that read attributes: op type -> (input, attributes) -> output.
_UNARY: dict[str, Callable[[Tensor, Attrs], Tensor]] = {
    "IsInf": _isinf,
    "LeakyRelu": lambda x, a: F.leaky_relu(x, a.get("alpha", 0.01)),
    "Elu": lambda x, a: F.elu(x, a.get("alpha", 1.0)),
    "Celu": lambda x, a: F.celu(x, a.get("alpha", 1.0)),
    "Selu": lambda x, a: (
        a.get("gamma", _SELU[1]) * torch.where(x > 0, x, a.get("alpha", _SELU[0]) * torch.expm1(x))
    ),
    "HardSigmoid": lambda x, a: torch.clamp(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0, 1),
    "ThresholdedRelu": lambda x, a: torch.where(x > a.get("alpha", 1.0), x, 0.0).to(x.dtype),
    "Gelu": lambda x, a: F.gelu(x, approximate=choice(a, "approximate", "none", {"none", "tanh"})),
    "Cast": lambda x, a: x.to(DTYPES[choice(a, "to", None, set(DTYPES))]),
}

# Elementwise ops of two inputs (broadcast as torch broadcasts): op type -> torch function.
_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": _div,
    "Pow": lambda a, b: torch.pow(a, b).to(a.dtype),  # ONNX Pow keeps the base's type
    "Equal": torch.eq,
    "Less": torch.lt,
    "Greater": torch.gt,
    "LessOrEqual": torch.le,
    "GreaterOrEqual": torch.ge,
    "And": torch.logical_and,
    "Or": torch.logical_or,
    "Xor": torch.logical_xor,
    "PRelu": lambda x, slope: torch.where(x < 0, x * slope, x),
    "CastLike": lambda x, like: x.to(like.dtype),
}

# Elementwise ops of any number of inputs: op type -> the pairwise step folded over them.
_VARIADIC: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "Max": torch.maximum,
    "Min": torch.minimum,
    "Sum": torch.add,
    "Mean": torch.add,
}


def _unary(op: str) -> OpFn:
    if op in _PLAIN:
        return lambda a, x, n: _PLAIN[op](x[0])
    return lambda a, x, n: _UNARY[op](x[0], a)


def _binary(op: str) -> OpFn:
    return lambda a, x, n: _BINARY[op](x[0], x[1])


def _variadic(op: str) -> OpFn:
    def run(a: Attrs, x: Args, n: int) -> Result:
        out = functools.reduce(_VARIADIC[op], x.given())
        return out / len(x.given()) if op == "Mean" else out

    return run


def _prod(x: Tensor, dims: list[int], keep: bool) -> Tensor:
    for d in sorted(dims, reverse=True):
        x = x.prod(d, keepdim=keep)
    return x


def _mean(x: Tensor, dims: list[int], keep: bool) -> Tensor:
    if x.is_floating_point():
        return torch.mean(x, dims, keepdim=keep)
    count = math.prod(x.size(d) for d in dims)  # onnxruntime: integer division, truncated
    return torch.div(torch.sum(x, dims, keepdim=keep), count, rounding_mode="trunc")


# Reductions: op type -> (data, dims, keepdims) -> reduced data.
_REDUCE: dict[str, Callable[[Tensor, list[int], bool], Tensor]] = {
    "ReduceSum": lambda x, d, k: torch.sum(x, d, keepdim=k),
    "ReduceMean": _mean,
    "ReduceMax": lambda x, d, k: torch.amax(x, d, keepdim=k),
    "ReduceMin": lambda x, d, k: torch.amin(x, d, keepdim=k),
    "ReduceProd": _prod,
    "ReduceL1": lambda x, d, k: torch.sum(x.abs(), d, keepdim=k),
    "ReduceL2": lambda x, d, k: torch.sqrt(torch.sum(x * x, d, keepdim=k)),
    "ReduceSumSquare": lambda x, d, k: torch.sum(x * x, d, keepdim=k),
    "ReduceLogSum": lambda x, d, k: torch.log(torch.sum(x, d, keepdim=k)),
    "ReduceLogSumExp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
}


def _reduce(op: str) -> OpFn:
    def run(a: Attrs, x: Args, n: int) -> Result:
        data, axes = x[0], a.get("axes", x.ints(1))  # an attribute up to opset 17, then input
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                return data
            axes = range(data.dim())
        dims = [resolve_axis(v, data.dim()) for v in axes]
        return _REDUCE[op](data, dims, bool(a.get("keepdims", 1))).to(data.dtype)

    return run


def _arg(fn: Callable[..., Tensor]) -> OpFn:
    def run(a: Attrs, x: Args, n: int) -> Result:
        axis, keep = resolve_axis(a.get("axis", 0), x[0].dim()), bool(a.get("keepdims", 1))
        if a.get("select_last_index", 0):  # torch picks the first of equal extremes
            return x[0].size(axis) - 1 - fn(x[0].flip(axis), axis, keep)
        return fn(x[0], axis, keep)

    return run


def _cumsum(a: Attrs, x: Args, n: int) -> Result:
    data, axis, flip = x[0], resolve_axis(int(x[1].item()), x[0].dim()), bool(a.get("reverse", 0))
    data = data.flip(axis) if flip else data
    out = data.cumsum(axis).to(data.dtype)
    if a.get("exclusive", 0):
        head = torch.zeros_like(out.narrow(axis, 0, 1))
        out = torch.cat([head, out.narrow(axis, 0, out.size(axis) - 1)], axis)
    return out.flip(axis) if flip else out


def _layer_norm(a: Attrs, x: Args, n: int) -> Result:
    data, eps, axis = x[0], a.get("epsilon", 1e-5), resolve_axis(a.get("axis", -1), x[0].dim())
    shape = data.shape[axis:]
    bias = None if x.opt(2) is None else x[2].expand(shape)
    y = F.layer_norm(data, shape, x[1].expand(shape), bias, eps)
    if n == 1:
        return y
    stash = data.float() if data.element_size() < 4 else data  # Mean, InvStdDev: float32
    var, mean = torch.var_mean(stash, list(range(axis, data.dim())), correction=0, keepdim=True)
    return y, mean, torch.rsqrt(var + eps)


def _group_norm(a: Attrs, x: Args, n: int) -> Result:
    data, scale, bias, groups = x[0], x[1], x[2], a["num_groups"]
    if scale.numel() != data.size(1):  # opset 18: a scale and a bias per group
        scale = scale.repeat_interleave(data.size(1) // groups)
        bias = bias.repeat_interleave(data.size(1) // groups)
    return F.group_norm(data, groups, scale, bias, a.get("epsilon", 1e-5))


def _instance_norm(a: Attrs, x: Args, n: int) -> Result:
    """Written out: F.instance_norm refuses one spatial element, which ONNX allows."""
    data = x[0]
    dims = tuple(range(2, data.dim()))
    centred = data - data.mean(dims, keepdim=True)
    var = (centred * centred).mean(dims, keepdim=True)
    shape = (1, -1) + (1,) * (data.dim() - 2)
    scaled = centred / torch.sqrt(var + a.get("epsilon", 1e-5))
    return scaled * x[1].view(shape) + x[2].view(shape)


def _rms_norm(a: Attrs, x: Args, n: int) -> Result:
    shape = x[0].shape[resolve_axis(a.get("axis", -1), x[0].dim()) :]
    return F.rms_norm(x[0], shape, x[1].expand(shape), a.get("epsilon", 1e-5))


def _constant_of_shape(a: Attrs, x: Args, n: int) -> Result:
    value = np.asarray(a.get("value", np.zeros(1, np.float32))).reshape(-1)[:1].copy()
    return torch.from_numpy(value).to(x[0].device).reshape(()).expand(x.ints(0) or [])


def _range(a: Attrs, x: Args, n: int) -> Result:
    start, limit, delta = x[0].item(), x[1].item(), x[2].item()
    return torch.arange(start, limit, delta, dtype=x[0].dtype, device=x[0].device)


def _clip(a: Attrs, x: Args, n: int) -> Result:
    lo, hi = x.opt(1), x.opt(2)
    return x[0] if lo is None and hi is None else torch.clamp(x[0], lo, hi)


def _batch_norm(a: Attrs, x: Args, n: int) -> Result:
    choice(a, "training_mode", 0, {0})
    scale, bias, mean, var = x[1], x[2], x[3], x[4]
    return F.batch_norm(x[0], mean, var, scale, bias, False, 0.0, a.get("epsilon", 1e-5))


def _dropout(a: Attrs, x: Args, n: int) -> Result:
    if x.opt(2) is not None and bool(x[2].item()):
        raise ExternError("input training_mode=True is not supported (inference only)")
    return x[0], torch.ones_like(x[0], dtype=torch.bool)


def _trilu(a: Attrs, x: Args, n: int) -> Result:
    k = (x.ints(1) or [0])[0]
    return torch.triu(x[0], k) if a.get("upper", 1) else torch.tril(x[0], k)


def _lp_norm(a: Attrs, x: Args, n: int) -> Result:
    norm = torch.linalg.vector_norm(x[0], choice(a, "p", 2, {1, 2}), a.get("axis", -1), True)
    return x[0] / torch.where(norm == 0, 1, norm)  # a zero vector stays zero


# The math ops of the fallback: ONNX op type -> op function.
MATH_OPS: dict[str, OpFn] = {
    **{op: _unary(op) for op in (*_PLAIN, *_UNARY)},
    **{op: _binary(op) for op in _BINARY},
    **{op: _variadic(op) for op in _VARIADIC},
    **{op: _reduce(op) for op in _REDUCE},
    "Mod": lambda a, x, n: (torch.fmod if a.get("fmod", 0) else torch.remainder)(x[0], x[1]),
    "Where": lambda a, x, n: torch.where(x[0], x[1], x[2]),
    "Clip": _clip,
    "BatchNormalization": _batch_norm,
    "Dropout": _dropout,
    "Trilu": _trilu,
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    "Softmax": lambda a, x, n: torch.softmax(x[0], a.get("axis", -1)),
    "LogSoftmax": lambda a, x, n: torch.log_softmax(x[0], a.get("axis", -1)),
    "LayerNormalization": _layer_norm,
    "GroupNormalization": _group_norm,
    "InstanceNormalization": _instance_norm,
    "RMSNormalization": _rms_norm,
    "LpNormalization": _lp_norm,
    "ArgMax": _arg(torch.argmax),
    "ArgMin": _arg(torch.argmin),
    "CumSum": _cumsum,
}
