"""The graph IR: ops and tensors with static shapes, op classes, fusion groups, kernel configs.

Everything above this package reads a model through these records; nothing here knows ONNX
files, rules or costs.
"""

from __future__ import annotations

from search_space.ir.config import KernelConfig
from search_space.ir.graph import (
    Graph,
    Op,
    Tensor,
    TensorKind,
    empty_tensors,
    inplace_bytes,
    is_compile_time,
    is_inplace_update,
)
from search_space.ir.groups import (
    GROUP_KINDS,
    FusionGroup,
    alias_root,
    make_group,
    singleton_groups,
)
from search_space.ir.ops import (
    CUBE_OPS,
    ELEMENTWISE_OPS,
    GATHER_OPS,
    LAYOUT_OPS,
    REDUCE_OPS,
    VIEW_OPS,
    OpClass,
    OpWork,
    classify,
    reduction_axes,
)

__all__ = [
    "CUBE_OPS",
    "ELEMENTWISE_OPS",
    "GATHER_OPS",
    "GROUP_KINDS",
    "LAYOUT_OPS",
    "REDUCE_OPS",
    "VIEW_OPS",
    "FusionGroup",
    "Graph",
    "KernelConfig",
    "Op",
    "OpClass",
    "OpWork",
    "Tensor",
    "TensorKind",
    "alias_root",
    "classify",
    "empty_tensors",
    "inplace_bytes",
    "is_compile_time",
    "is_inplace_update",
    "make_group",
    "reduction_axes",
    "singleton_groups",
]
