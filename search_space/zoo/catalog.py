"""The zoo's catalogue: every model by name, what it is, and :func:`build`.

Every model is fp32, opset 17, IR version 8, with static shapes. Weights come either as seeded
random initializers (`weights="random"`) or as shape-only graph inputs (`weights="inputs"`,
names listed as JSON under the `ai.autofusion.weight_inputs` metadata key), so that even the
Llama-3-8B stack costs almost no memory.

"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

import onnx

from search_space.zoo import cnn, decode, decoders, transformers
from search_space.zoo.builder import (
    CACHE_FORMS,
    WEIGHT_MODES,
    ZOO_KEY,
    BuildArgs,
    ModelSpec,
    ZooError,
    check,
)

__all__ = ["ZooInfo", "build", "list_models", "model_axes"]

_SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in sorted(
        [*transformers.SPECS, *decoders.SPECS, *decode.SPECS, *cnn.SPECS], key=lambda sp: sp.name
    )
}


@dataclass(frozen=True)
class ZooInfo:
    """What a zoo model is.

    Attributes:
        name: the name `build` takes.
        family: "transformer" or "cnn".
        description: one line with the defining dimensions.
        default_batch: batch size at scale 1.
        params: trainable parameter count at scale 1 (BatchNorm running statistics and fixed
            tables such as sinusoidal positions or rotary cos/sin are not parameters).
        layers: default number of layers (per stack for encoder-decoders) or blocks.
        min_layers: the fewest layers or blocks ``build`` takes.
        takes_seq_len: ``build`` takes ``seq_len`` (the prompt models).
        takes_cache_len: ``build`` takes ``cache_len`` and ``cache_form`` (the decode steps).
    """

    name: str
    family: str
    description: str
    default_batch: int
    params: int
    layers: int
    min_layers: int
    takes_seq_len: bool
    takes_cache_len: bool


def _spec(name: str) -> ModelSpec:
    if name not in _SPECS:
        raise ZooError(f"unknown zoo model {name!r}; available: {', '.join(_SPECS)}")
    return _SPECS[name]


@functools.cache
def _info(name: str) -> ZooInfo:
    spec = _SPECS[name]
    meta = {p.key: p.value for p in build(name, weights="inputs").metadata_props}
    params = int(json.loads(meta[ZOO_KEY])["params"])
    return ZooInfo(
        spec.name,
        spec.family,
        spec.description,
        spec.default_batch,
        params,
        spec.default_layers,
        spec.min_layers,
        spec.has_seq,
        spec.has_cache,
    )


def model_axes(name: str) -> tuple[str, ...]:
    """The dims a zoo model can be built at (a shape range may span them): ``batch``, then
    ``seq`` for a model with a sequence axis and ``cache`` for a decode step.

    Raises:
        ZooError: an unknown model.
    """
    spec = _spec(name)
    return ("batch", *(("seq",) if spec.has_seq else ()), *(("cache",) if spec.has_cache else ()))


def list_models() -> list[ZooInfo]:
    """All zoo models, sorted by name (the first call builds each shape-only to count params)."""
    return [_info(name) for name in _SPECS]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_sequence(
    spec: ModelSpec, seq_len: int | None, cache_len: int | None, cache_form: str | None
) -> None:
    """`seq_len` only for models with a sequence axis; `cache_*` only for decode steps."""
    name = spec.name
    if seq_len is not None:
        check(
            not spec.has_cache,
            f"{name} decodes one new token per sequence (cache_len sets the past), but got "
            f"seq_len={seq_len!r}",
        )
        check(spec.has_seq, f"{name} has no sequence axis, but got seq_len={seq_len!r}")
        check(
            _is_int(seq_len) and seq_len >= 1,
            f"`seq_len >= 1` must hold, but got seq_len={seq_len!r}",
        )
    for flag, value in (("cache_len", cache_len), ("cache_form", cache_form)):
        check(
            value is None or spec.has_cache,
            f"{name} has no KV cache (a *-decode model has), but got {flag}={value!r}",
        )
    if cache_len is not None:
        check(
            _is_int(cache_len) and cache_len >= 1,
            f"`cache_len >= 1` must hold, but got cache_len={cache_len!r}",
        )
    check(
        cache_form is None or cache_form in CACHE_FORMS,
        f"cache_form must be one of {', '.join(CACHE_FORMS)}, but got cache_form={cache_form!r}",
    )


def build(
    name: str,
    *,
    weights: str = "random",
    scale: float = 1.0,
    layers: int | None = None,
    batch: int | None = None,
    seq_len: int | None = None,
    seed: int = 0,
    cache_len: int | None = None,
    cache_form: str | None = None,
) -> onnx.ModelProto:
    """Build a zoo model.

    Args:
        name: one of the names `list_models()` returns.
        weights: "random" embeds seeded float32 weights as initializers; "inputs" makes every
            weight a shape-only graph input (listed under `ai.autofusion.weight_inputs`).
        scale: in (0, 1]; multiplies widths, head counts, layers, sequence length, image size,
            vocabulary and batch (rounded to keep head_dim and channels multiples of 8).
        layers: number of layers/blocks, overriding the scaled default; at most the model's
            full depth.
        batch: batch size, overriding the scaled default.
        seq_len: sequence length of sequence models, overriding the scaled default; at most the
            (scaled) position table. Not for the decode steps (`*-decode`).
        seed: seed of the random weights.
        cache_len: decode steps only: tokens already in the KV cache (the new token's
            position), overriding the scaled default; `cache_len + 1` at most the position
            table.
        cache_form: decode steps only: "static" (default; a preallocated cache of
            `cache_len + 1` slots updated with ScatterND) or "concat" (past ++ new row).

    Returns:
        A model that passes `onnx.checker.check_model(model, full_check=True)`.

    Raises:
        ZooError: unknown name, or an argument outside its rule (the message says which).
    """
    spec = _spec(name)
    check(
        weights in WEIGHT_MODES,
        f"weights must be one of {', '.join(WEIGHT_MODES)}, but got weights={weights!r}",
    )
    check(
        isinstance(scale, int | float)
        and not isinstance(scale, bool)
        and math.isfinite(scale)
        and 0 < scale <= 1,
        f"`0 < scale <= 1` must hold, but got scale={scale!r}",
    )
    if layers is not None:
        lo, hi = spec.min_layers, spec.default_layers
        check(
            _is_int(layers) and lo <= layers <= hi,
            f"`{lo} <= layers <= {hi}` must hold for {name}, but got layers={layers!r}",
        )
    if batch is not None:
        check(_is_int(batch) and batch >= 1, f"`batch >= 1` must hold, but got batch={batch!r}")
    _check_sequence(spec, seq_len, cache_len, cache_form)
    check(_is_int(seed) and seed >= 0, f"`seed >= 0` must hold, but got seed={seed!r}")
    form = cache_form or CACHE_FORMS[0]
    args = BuildArgs(name, weights, float(scale), layers, batch, seq_len, seed, cache_len, form)
    return spec.build(args)
