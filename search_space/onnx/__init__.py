"""ONNX in: reading a model file (external data included), folding the shape computations
exporters emit, and building the static :class:`~search_space.ir.Graph`."""

from __future__ import annotations

from search_space.onnx.fold import FOLD_LIMIT, attributes_of, evaluate
from search_space.onnx.io import (
    MIN_OPSET,
    ModelSource,
    declared_dims,
    default_opset,
    node_names,
    parse_input_shapes,
    read_model,
    read_model_with_data,
    save_model,
    static_input_dims,
    topological_order,
)
from search_space.onnx.loader import WEIGHT_INPUTS_KEY, load_graph

__all__ = [
    "FOLD_LIMIT",
    "MIN_OPSET",
    "WEIGHT_INPUTS_KEY",
    "ModelSource",
    "attributes_of",
    "declared_dims",
    "default_opset",
    "evaluate",
    "load_graph",
    "node_names",
    "parse_input_shapes",
    "read_model",
    "read_model_with_data",
    "save_model",
    "static_input_dims",
    "topological_order",
]
