"""What every op family of the PyTorch fallback shares: the error it raises, the wrapper of an
op's inputs in ONNX positions, the table of ONNX element types, the type aliases of an op
function, and the small helpers that read an attribute or an axis the way ONNX defines them.
Like the rest of the package it imports torch, the standard library and the tool's error base
only: generated code imports it at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from search_space.exceptions import AutofusionError

Tensor = torch.Tensor
Attrs = Mapping[str, Any]
Result = Tensor | tuple[Tensor, ...]

# ONNX TensorProto element types -> torch dtypes.
DTYPES = {
    1: torch.float32,
    2: torch.uint8,
    3: torch.int8,
    5: torch.int16,
    6: torch.int32,
    7: torch.int64,
    9: torch.bool,
    10: torch.float16,
    11: torch.float64,
    16: torch.bfloat16,
}


class ExternError(AutofusionError, ValueError):
    """An op type, or an attribute value of a known op, that the fallback does not handle."""


@dataclass(frozen=True)
class Args:
    """The inputs of one op in ONNX positions; ``None`` marks an omitted optional input."""

    inputs: tuple[Tensor | None, ...]

    def __getitem__(self, i: int) -> Tensor:
        t = self.opt(i)
        if t is None:
            raise ExternError(f"input {i} is required")
        return t

    def opt(self, i: int) -> Tensor | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def ints(self, i: int) -> list[int] | None:
        """An optional int64 data input (a shape, axes, pads) as a list."""
        t = self.opt(i)
        return None if t is None else [int(v) for v in t.reshape(-1).tolist()]

    def given(self) -> list[Tensor]:
        return [t for t in self.inputs if t is not None]


# An op: (attributes, inputs, number of outputs) -> one tensor or a tuple of them.
OpFn = Callable[[Attrs, Args, int], Result]


def choice(attrs: Attrs, name: str, default: Any, allowed: set[Any]) -> Any:
    """Attribute ``name``, which must be one of ``allowed``."""
    value = attrs.get(name, default)
    value = value.decode() if isinstance(value, bytes) else value
    if value not in allowed:
        known = ", ".join(repr(v) for v in sorted(allowed))
        raise ExternError(f"attribute {name}={value!r} is not supported; supported: {known}")
    return value


def resolve_axis(axis: int, rank: int) -> int:
    """An ONNX axis (a negative one counts from the end) as a dim of a rank-``rank`` tensor."""
    return axis + rank if axis < 0 else axis
