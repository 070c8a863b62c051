"""Resolving the MODEL argument of every command: a file path or ``zoo:NAME``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from search_space.ir import Graph
from search_space.onnx import load_graph
from search_space.zoo.catalog import build

__all__ = ["ZooOptions", "build_zoo", "load_model_spec", "resolve_model"]


@dataclass(frozen=True)
class ZooOptions:
    """How to build a zoo model named on the command line (ignored for files)."""

    weights: str = "inputs"
    scale: float = 1.0
    layers: int | None = None
    batch: int | None = None
    seq_len: int | None = None
    cache_len: int | None = None
    cache_form: str | None = None


def resolve_model(spec: str, zoo: ZooOptions | None = None) -> str | onnx.ModelProto:
    """A path stays a path; ``zoo:NAME`` is built (weights as inputs unless asked otherwise).

    Raises:
        AutofusionError: unknown zoo model or bad zoo options (a ZooError).
    """
    if not spec.startswith("zoo:"):
        return spec
    return build_zoo(spec[4:], zoo or ZooOptions())


def build_zoo(name: str, zoo: ZooOptions, **extra: Any) -> onnx.ModelProto:
    """The zoo model ``name`` built with ``zoo``'s options (``extra``: more of
    :func:`~search_space.zoo.catalog.build`'s, such as ``seed``).

    Raises:
        ZooError: an unknown name or an option outside its rule.
    """
    return build(name, **dataclasses.asdict(zoo), **extra)


def load_model_spec(
    spec: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    zoo: ZooOptions | None = None,
) -> Graph:
    """Load MODEL (path or ``zoo:NAME``) as a static graph."""
    return load_graph(resolve_model(spec, zoo), input_shapes=input_shapes)
