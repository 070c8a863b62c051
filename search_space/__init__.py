"""Search space: the graph IR, operator classes, and (later) fusion candidates and plans."""

from __future__ import annotations

from search_space.exceptions import (
    AutofusionError,
    DynamicShapeError,
    GraphError,
    ModelLoadError,
    check,
)
from search_space.graph import Graph, Op, Tensor
from search_space.loader import WEIGHT_INPUTS_KEY, load_graph
from search_space.onnx_io import parse_input_shapes, read_model
from search_space.ops import OpClass

__all__ = [
    "WEIGHT_INPUTS_KEY",
    "AutofusionError",
    "DynamicShapeError",
    "Graph",
    "GraphError",
    "ModelLoadError",
    "Op",
    "OpClass",
    "Tensor",
    "check",
    "load_graph",
    "parse_input_shapes",
    "read_model",
]
__version__ = "0.1.0"
