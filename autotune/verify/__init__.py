"""Verification (docs/verification.md): graph equivalence of the fused model in onnxruntime (level
1), and kernel numerics (level 2): emulate each fused kernel as it would run, compare it with a
float64 reference of the unfused ops, and unfuse the kernels that fail (safe mode).

    >>> verdicts = verify_kernels(model, graph, plan_groups, target, policy)
    >>> groups, counts = safe_groups(plan_groups, verdicts)
"""

from __future__ import annotations

from autotune.verify.check import (
    KernelVerdict,
    Status,
    safe_groups,
    verify_group,
    verify_kernels,
)
from autotune.verify.cube import flash_attention, online_softmax, split_k_matmul
from autotune.verify.emulate import emulate, kernel_roles
from autotune.verify.equivalence import draw_inputs, graph_equivalence
from autotune.verify.extract import SkipVerification, Subgraph, extract_group
from autotune.verify.judge import Errors, Judgement, compare, judge
from autotune.verify.numerics import Numerics, numerics_for
from autotune.verify.reference import reference_outputs
from autotune.verify.shrink import NotShrinkable
from autotune.verify.sources import ModelSource

__all__ = [
    "Errors",
    "Judgement",
    "KernelVerdict",
    "ModelSource",
    "NotShrinkable",
    "Numerics",
    "SkipVerification",
    "Status",
    "Subgraph",
    "compare",
    "draw_inputs",
    "emulate",
    "extract_group",
    "flash_attention",
    "graph_equivalence",
    "judge",
    "kernel_roles",
    "numerics_for",
    "online_softmax",
    "reference_outputs",
    "safe_groups",
    "split_k_matmul",
    "verify_group",
    "verify_kernels",
]
