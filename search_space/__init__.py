"""search_space: the graph IR, fusion legality, rules and the Optuna search space.

Subpackages, each importing only those before it: :mod:`~search_space.ir` (graph, ops,
groups, configs), :mod:`~search_space.onnx` (model files in), :mod:`~search_space.fusion`
(legal groups), :mod:`~search_space.rules` (rules, presets, policy, greedy) and
:mod:`~search_space.space` (the Optuna space, baselines, optimal, plan records).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from search_space.exceptions import (
    AutofusionError,
    DynamicShapeError,
    GraphError,
    ModelLoadError,
    check,
)
from search_space.ir import Graph, Op, OpClass, Tensor

if TYPE_CHECKING:  # imported on first use (__getattr__): reading models needs onnx
    from search_space.onnx import WEIGHT_INPUTS_KEY, load_graph, parse_input_shapes, read_model

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
_ONNX = frozenset({"WEIGHT_INPUTS_KEY", "load_graph", "parse_input_shapes", "read_model"})


def __getattr__(name: str) -> object:
    """The model-reading names, from :mod:`search_space.onnx` on first use (it imports onnx,
    which a command that reads no model need not pay for)."""
    if name not in _ONNX:
        raise AttributeError(f"module 'search_space' has no attribute '{name}'")
    value = getattr(importlib.import_module("search_space.onnx"), name)
    globals()[name] = value
    return value
