"""MODEL ``python:package.module:factory`` on the command line: a function returning
``(module, example_inputs)``, exported to ONNX at the example inputs' shapes, so every command
(``inspect``, ``tune``, ``codegen``, ``report``...) works on PyTorch code."""

from __future__ import annotations

import importlib
import os
import sys

import onnx
import torch

from autotune.exceptions import AutotuneError
from autotune.frontend.export import as_inputs, export_module, first_line

__all__ = ["PREFIX", "python_model"]

PREFIX = "python:"


def python_model(spec: str) -> onnx.ModelProto:
    """The model a ``python:package.module:factory`` spec names, as ONNX.

    Raises:
        AutotuneError: a malformed spec, a module that does not import, a factory that is
            missing or does not return ``(module, example_inputs)``, or what the export
            refuses (one line each).
    """
    path, _, name = spec.removeprefix(PREFIX).partition(":")
    if not path or not name:
        raise AutotuneError(
            f"model '{spec}' is not python:package.module:factory (a function returning "
            "(module, example_inputs))"
        )
    factory = getattr(_import(path, spec), name, None)
    if not callable(factory):
        raise AutotuneError(f"'{path}' has no function '{name}' (model '{spec}')")
    try:
        made = factory()
    except Exception as err:  # the user's code: any error it raises is the reason
        raise AutotuneError(f"calling {path}:{name}() failed: {first_line(err)}") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise AutotuneError(
            f"{path}:{name}() returned a {type(made).__name__}; it must return "
            "(module, example_inputs)"
        )
    module, inputs = made
    return export_module(module, as_inputs(inputs)).model


def _import(path: str, spec: str) -> object:
    """``path`` imported as ``python -m`` would, with the working folder on the path."""
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        return importlib.import_module(path)
    except Exception as err:  # the user's module: any error it raises is the reason
        reason = first_line(err)
        raise AutotuneError(f"cannot import '{path}' (model '{spec}'): {reason}") from None
    finally:
        if added:
            sys.path.remove(here)
