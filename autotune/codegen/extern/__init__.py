"""ONNX ops run as PyTorch eager calls: the fallback of a generated runner.

An op that no Triton template expresses runs here, as TorchInductor falls back to aten.
Semantics are ONNX opset 17's, plus the later forms where an input replaced an attribute
(ReduceX ``axes``, Split ``num_outputs``, Pad ``axes``) and GroupNormalization (18, 21) and
RMSNormalization (23). Generated code imports this package at run time, so it imports only
torch, numpy, math and the standard library. Outputs are contiguous and never alias an input.
The ops live by concept in ``math_ops``, ``nn_ops`` and ``layout_ops``; ``common`` holds what
they share.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from autotune.codegen.extern.common import Args, ExternError, OpFn, Tensor
from autotune.codegen.extern.layout_ops import LAYOUT_OPS
from autotune.codegen.extern.math_ops import MATH_OPS
from autotune.codegen.extern.nn_ops import NN_OPS

__all__ = ["SUPPORTED", "ExternError", "extern_op"]

# Every op of the fallback: ONNX op type -> op function, assembled from the modules' tables.
_OPS: dict[str, OpFn] = {**MATH_OPS, **NN_OPS, **LAYOUT_OPS}

SUPPORTED: frozenset[str] = frozenset(_OPS)


def _fresh(t: Tensor, inputs: Sequence[Tensor | None]) -> Tensor:
    """``t`` contiguous and in storage of its own (a view of an input is copied)."""
    mine = t.untyped_storage().data_ptr()
    shared = any(i is not None and i.untyped_storage().data_ptr() == mine for i in inputs)
    return t.clone(memory_format=torch.contiguous_format) if shared else t.contiguous()


def extern_op(
    op_type: str,
    attrs: Mapping[str, Any],
    inputs: Sequence[torch.Tensor | None],
    n_outputs: int = 1,
) -> tuple[torch.Tensor, ...]:
    """Run one ONNX op (default domain) on torch tensors, as ONNX opset 17 defines it (and the
    opset-18 forms where an input replaced an attribute).

    Args:
        op_type: one of ``SUPPORTED``.
        attrs: the node's attributes as Python values (ints, floats, str, lists, numpy arrays).
        inputs: the node's inputs in ONNX positions, ``None`` for an omitted optional input;
            data inputs (shapes, axes, pads, indices) are int64 tensors.
        n_outputs: how many outputs the node has.

    Returns:
        ``n_outputs`` contiguous tensors of the dtypes ONNX gives, none aliasing an input.

    Raises:
        ExternError: the op type, or an attribute value of it, is not handled (the message
            names the op type and the attribute).
    """
    fn = _OPS.get(op_type)
    if fn is None:
        near = difflib.get_close_matches(op_type, SUPPORTED, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise ExternError(f"ONNX op type {op_type!r} has no PyTorch fallback{hint}")
    try:
        result = fn(attrs, Args(tuple(inputs)), n_outputs)
    except ExternError as err:
        raise ExternError(f"{op_type}: {err}") from None
    outputs = (result,) if isinstance(result, Tensor) else result
    return tuple(_fresh(t, inputs) for t in outputs[:n_outputs])
