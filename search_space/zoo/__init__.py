"""Model zoo: well-known networks built in code with onnx.helper, at full or reduced scale.

Every model is fp32, opset 17, IR version 8, with static shapes. Weights come either as seeded
random initializers (`weights="random"`) or as shape-only graph inputs (`weights="inputs"`,
names listed as JSON under the `ai.autofusion.weight_inputs` metadata key), so that even the
Llama-3-8B stack costs almost no memory. ``zoo:NAME`` on the command line is resolved by
:func:`resolve_model`. ``gpt2-decode`` and ``llama3-8b-decode`` are one LLM decode step over
a KV cache (``cache_len``, ``cache_form``; see :mod:`search_space.zoo.decode`).

    >>> from search_space.zoo import build, list_models
    >>> model = build("bert-base", scale=0.1)
"""

from __future__ import annotations

from search_space.zoo.builder import (
    INPUT_RANGES_KEY,
    WEIGHT_INPUTS_KEY,
    ZOO_KEY,
    BuildArgs,
    Builder,
    ModelSpec,
    ZooError,
)
from search_space.zoo.catalog import ZooInfo, build, list_models, model_axes
from search_space.zoo.resolve import ZooOptions, build_zoo, load_model_spec, resolve_model

__all__ = [
    "INPUT_RANGES_KEY",
    "WEIGHT_INPUTS_KEY",
    "ZOO_KEY",
    "BuildArgs",
    "Builder",
    "ModelSpec",
    "ZooError",
    "ZooInfo",
    "ZooOptions",
    "build",
    "build_zoo",
    "list_models",
    "load_model_spec",
    "model_axes",
    "resolve_model",
]
