"""The float64 oracle: the unfused ops of a group in onnx's reference evaluator, all in double.

Every float tensor of the subgraph (feeds, weights, constants, Cast targets, tensor attributes
such as ConstantOfShape's value) is promoted to float64, so the reference rounds nowhere a
kernel could be blamed for.
"""

from __future__ import annotations

import numpy as np
from onnx.reference import ReferenceEvaluator

from autotune.verify.extract import Subgraph
from autotune.verify.pooling import FAST_OPS

__all__ = ["reference_outputs"]


def reference_outputs(sub: Subgraph) -> dict[str, np.ndarray]:
    """Every output of ``sub`` computed in float64 from the same inputs the emulation sees."""
    evaluator = ReferenceEvaluator(sub.model(float64=True), new_ops=FAST_OPS)
    outs = evaluator.run(None, sub.run_feeds(float64=True))
    return {t: np.asarray(o) for t, o in zip(sub.outputs, outs, strict=True)}
