"""The float64 oracle: the unfused ops of a group in onnx's reference evaluator, all in double.

Every float tensor of the subgraph (feeds, weights, constants, Cast targets, tensor attributes
such as ConstantOfShape's value) is promoted to float64, so the reference rounds nowhere a
kernel could be blamed for. The evaluator runs with ``REFERENCE_OPS``: the pools of
:mod:`.pooling`, and ops onnx 1.23 gets wrong: Mean (it adds in place into its first input,
which fails when that one broadcasts: Mean([1, 1], [4, 5])) and Softsign (it fails on a 0-d
tensor). The emulation's fallback for ops without a numpy kernel uses them too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from autotune.verify.extract import Subgraph
from autotune.verify.pooling import FAST_OPS

__all__ = ["REFERENCE_OPS", "reference_outputs"]


class Mean(OpRun):
    """onnx's Mean, its inputs broadcast whichever comes first."""

    def _run(self, *args: np.ndarray) -> Any:
        return ((sum(args[1:], args[0]) / len(args)).astype(args[0].dtype),)


class Softsign(OpRun):
    """onnx's Softsign, 0-d tensors included."""

    def _run(self, x: np.ndarray) -> Any:
        return (np.asarray(x / (1 + np.abs(x)), dtype=x.dtype),)


REFERENCE_OPS: list[type[OpRun]] = [*FAST_OPS, Mean, Softsign]


def reference_outputs(sub: Subgraph) -> dict[str, np.ndarray]:
    """Every output of ``sub`` computed in float64 from the same inputs the emulation sees."""
    evaluator = ReferenceEvaluator(sub.model(float64=True), new_ops=REFERENCE_OPS)
    outs = evaluator.run(None, sub.run_feeds(float64=True))
    return {t: np.asarray(o) for t, o in zip(sub.outputs, outs, strict=True)}
