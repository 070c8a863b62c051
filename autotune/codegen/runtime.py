"""What a generated package calls at run time: the device, input checks, parameters, and the
framework fallback for ops no template computes. Imports torch and numpy only (and the
fallback table), so a generated package runs wherever they do."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from autotune.codegen.extern import extern_op

__all__ = [
    "check_inputs",
    "extern_op",
    "load_params",
    "pick_device",
    "stored",
    "to_numpy",
    "torch_dtype",
]

_TORCH = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


def pick_device(prefer: str | None = None) -> str:
    """The first of npu, cuda and the CPU interpreter that is present (``AUTOTUNE_DEVICE``
    or ``prefer`` chooses). On the CPU, Triton's interpreter runs the kernels: this sets
    ``TRITON_INTERPRET=1``, which must happen before the kernels are imported."""
    choice = prefer or os.environ.get("AUTOTUNE_DEVICE", "")
    if not choice:
        if importlib.util.find_spec("torch_npu") is not None:
            import torch_npu  # noqa: F401  (registers the npu device)

            choice = "npu" if torch.npu.is_available() else ""  # type: ignore[attr-defined]
        if not choice:
            choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        _interpreted_stdlib()
    return choice


def _interpreted_stdlib() -> None:
    """Triton's library functions (``tl.sum``, ``tl.sigmoid``...) are made when
    ``triton.language`` is first imported, for the compiler unless the interpreter was chosen
    by then; an interpreted kernel cannot call them. Where Triton came first (torch.compile
    imports it), they are made again for the interpreter."""
    import sys

    if "triton.language" not in sys.modules:
        return
    import triton.language as tl
    from triton.language import random, standard

    if type(tl.sum).__name__ == "InterpretedFunction":
        return
    for module in (standard, random):
        importlib.reload(module)
        for name, obj in vars(module).items():
            if type(obj).__name__ == "InterpretedFunction" and hasattr(tl, name):
                setattr(tl, name, obj)


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH[name]


def stored(value: torch.Tensor, name: str) -> torch.Tensor:
    """``value`` in the type ``name`` the plan's precision stores it in; a finite wider float
    narrowed to float16 saturates at float16's largest finite value, as the kernels store
    (infinities and NaN stay)."""
    dtype = _TORCH[name]
    if dtype == torch.float16 and value.dtype in (torch.float32, torch.float64):
        value = torch.where(value.isfinite(), value.clamp(-65504.0, 65504.0), value)
    return value.to(dtype)


def check_inputs(
    given: Mapping[str, Any], expected: Mapping[str, tuple[tuple[int, ...], str]]
) -> None:
    """Every expected input present, of its shape and type; raises ValueError naming the
    first that is not (the CLI turns it into one line)."""
    missing = [n for n in expected if n not in given]
    if missing:
        raise ValueError(f"input '{missing[0]}' is missing; the model takes {', '.join(expected)}")
    extra = [n for n in given if n not in expected]
    if extra:
        raise ValueError(f"the model has no input '{extra[0]}'; it takes {', '.join(expected)}")
    for name, (shape, dtype) in expected.items():
        value = given[name]
        got_shape = tuple(value.shape)
        got = str(value.dtype).replace("torch.", "")
        if got_shape != shape:
            raise ValueError(f"input '{name}' has shape {list(got_shape)}, expected {list(shape)}")
        if got != dtype:
            raise ValueError(f"input '{name}' is {got}, expected {dtype}")


def load_params(path: Path) -> dict[str, np.ndarray]:
    """The package's compile-time tensors (an .npz read without pickle)."""
    if not path.exists():
        return {}
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def to_numpy(values: Sequence[torch.Tensor], names: Sequence[str]) -> dict[str, np.ndarray]:
    return {n: v.detach().cpu().numpy() for n, v in zip(names, values, strict=True)}
