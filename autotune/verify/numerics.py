"""Number formats of an emulated kernel: which format each kind of value lives in
(docs/cost-model.md).

Values are numpy arrays in their real format (float16, bfloat16 via ml_dtypes, float32,
float64). An operation is computed exactly in float64 and rounded once to its format, which is
what correctly rounded hardware arithmetic does for + - * / and close to what it does for
exp/erf/tanh. Reductions add pairwise and round after every addition (:func:`tree_sum`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from costmodel.spec import Target
from search_space.ir import KernelConfig

try:  # ml_dtypes ships with onnx; keep a bit-rounding fallback all the same
    import ml_dtypes

    _BF16: np.dtype[Any] | None = np.dtype(ml_dtypes.bfloat16)
    _BF16_MAX = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
except ImportError:  # pragma: no cover - exercised only without ml_dtypes
    _BF16 = None
    _BF16_MAX = 3.3895313892515355e38

__all__ = [
    "FORMATS",
    "Numerics",
    "is_float",
    "number_format",
    "numerics_for",
    "numerics_key",
    "rnd",
    "stable_rng",
    "tree_sum",
]

FORMATS = ("fp16", "bf16", "fp32", "fp64")
_NP: dict[str, np.dtype[Any]] = {
    "fp16": np.dtype(np.float16),
    "fp32": np.dtype(np.float32),
    "fp64": np.dtype(np.float64),
}
_MAX = {
    "fp16": float(np.finfo(np.float16).max),
    "bf16": _BF16_MAX,
    "fp32": float(np.finfo(np.float32).max),
    "fp64": float(np.finfo(np.float64).max),
}
STATS_FP16 = "stats_fp16"  # template knob: keep reductions/statistics in fp16


@dataclass(frozen=True)
class Numerics:
    """Formats and tiling that decide a kernel's rounding.

    Attributes:
        cube: format of cube operands (L0A/L0B).
        acc: format of the cube accumulator (L0C) and of FixPipe epilogues.
        vec: format vector ops compute elementwise work in.
        stat: format of reductions and row statistics (means, variances, softmax sums).
        mem: format of float activations in global memory (between kernels).
        base_k: split-K chunk of the cube (partial sums added in tile order); 0 = whole K.
        kv_tile: key block of fused attention's online softmax; 0 = all keys at once.
        kv_split: parts the keys are cut into, each its own online softmax, combined by
            their log-sum-exp (flash-decoding); 0 or 1 = one part.
    """

    cube: str
    acc: str
    vec: str
    stat: str
    mem: str
    base_k: int = 0
    kv_tile: int = 0
    kv_split: int = 0

    def with_tiles(self, base_k: int = 0, kv_tile: int = 0) -> Numerics:
        return replace(self, base_k=base_k, kv_tile=kv_tile)


def number_format(itemsize: int, precision: str) -> str:
    """The format (``FORMATS``) of a value of ``itemsize`` bytes under a precision mode."""
    if itemsize <= 2:
        return "bf16" if precision == "bf16" else "fp16"
    return "fp32" if itemsize == 4 else "fp64"


def numerics_for(
    target: Target, model_itemsize: int, config: KernelConfig | None = None
) -> Numerics:
    """The formats a kernel runs in under the target's precision mode and its config.

    ``auto``: fp16 cube operands, fp32 accumulation, vector ops and memory in the model's
    dtype. ``fp16``/``bf16``: everything 16-bit (accumulation stays fp32 in L0C). ``fp32``:
    fp32 operands. ``mixed``: 16-bit cube, elementwise and memory, fp32 reductions. The knob
    ``stats_fp16`` (a template option) keeps statistics in fp16 whatever the mode.
    """
    p = target.precision
    vec = number_format(target.vector_itemsize(model_itemsize), p)
    stat = number_format(target.vector_itemsize(model_itemsize, reduce=True), p)
    if config is not None and config.knob(STATS_FP16):
        stat = "fp16"
    return Numerics(
        cube=number_format(target.cube_itemsize(model_itemsize), p),
        acc="fp32" if model_itemsize <= 4 else "fp64",
        vec=vec,
        stat=stat,
        mem=vec,
        base_k=config.base_k if config is not None else 0,
        kv_tile=config.knob("kv_tile") if config is not None else 0,
        kv_split=config.knob("kv_split") if config is not None else 0,
    )


def numerics_key(config: KernelConfig | None) -> tuple[int, int, int, int]:
    """What of a config :func:`numerics_for` reads (the K chunk, the ``stats_fp16``,
    ``kv_tile`` and ``kv_split`` knobs): configs with equal keys compute alike, so one verdict
    covers them (core counts and UB or L1 tiles change where the work runs, not its
    arithmetic)."""
    if config is None:
        return (0, 0, 0, 0)
    knob = config.knob
    return (config.base_k, knob(STATS_FP16), knob("kv_tile"), knob("kv_split"))


def is_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f" or (_BF16 is not None and x.dtype == _BF16)


def _bf16_fallback(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest even) on float32 bits, kept as float32."""
    x32 = np.asarray(x, dtype=np.float32)
    bits = x32.view(np.uint32).astype(np.uint64)
    rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) & np.uint64(
        0xFFFF0000
    )
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x32), x32, out)


def rnd(x: Any, fmt: str, *, saturate: bool = False) -> np.ndarray:
    """``x`` rounded to ``fmt`` (overflow gives inf unless ``saturate`` clamps to the max)."""
    a = np.asarray(x)
    if not is_float(a):
        a = a.astype(np.float64)
    if saturate:
        top = _MAX[fmt]
        a = np.clip(a.astype(np.float64), -top, top)
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt == "bf16":
            if _BF16 is None:  # pragma: no cover
                return _bf16_fallback(a)
            bf16: np.dtype[Any] = _BF16
            return a.astype(np.float32).astype(bf16)
        return a.astype(_NP[fmt])


def f64(x: Any) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def tree_sum(
    x: np.ndarray, axis: int | tuple[int, ...], fmt: str, keepdims: bool = True
) -> np.ndarray:
    """Sum along ``axis`` pairwise, rounding every partial sum to ``fmt`` (a vector reduce)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    a = f64(rnd(x, fmt))
    nd = a.ndim
    axes = tuple(sorted(ax % nd for ax in axes))
    keep = [i for i in range(nd) if i not in axes]
    moved = np.transpose(a, keep + list(axes))
    lead = moved.shape[: len(keep)]
    flat = moved.reshape(*lead, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        while flat.shape[-1] > 1:
            if flat.shape[-1] % 2:
                flat = np.concatenate([flat, np.zeros((*lead, 1))], axis=-1)
            flat = f64(rnd(flat[..., 0::2] + flat[..., 1::2], fmt))
    if flat.shape[-1] == 0:
        flat = np.zeros((*lead, 1))
    out = flat[..., 0]
    if keepdims:
        for ax in axes:
            out = np.expand_dims(out, ax)
    return rnd(out, fmt)


def stable_rng(seed: int, name: str) -> np.random.Generator:
    """A generator that depends on the seed and a tensor name only (not on draw order)."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])
