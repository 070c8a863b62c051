"""Search space: the graph IR, operator classes, and (later) fusion candidates and plans."""

from __future__ import annotations

from .exceptions import AutofusionError, DynamicShapeError, GraphError, ModelLoadError, check
from .graph import Graph, Op, Tensor
from .loader import WEIGHT_INPUTS_KEY, load_graph
from .onnx_io import parse_input_shapes, read_model
from .ops import OpClass

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
