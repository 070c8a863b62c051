"""Running a generated package: import it from its folder, feed it, and check it against
onnxruntime on the original model."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from autotune.codegen.errors import CodegenError
from autotune.codegen.package import FORMAT, MANIFEST

__all__ = ["load_package", "read_manifest", "run_package"]


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """A package's manifest.

    Raises:
        CodegenError: the folder is not a package `autotune codegen` wrote.
    """
    path = Path(folder) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        raise CodegenError(
            f"'{folder}' is not a generated package (no readable {MANIFEST}); "
            "write one with `autotune codegen MODEL PLAN -o DIR`"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CodegenError(f"'{folder}' was written by another version ({FORMAT} expected)")
    return data


def load_package(folder: str | Path) -> ModuleType:
    """Import a generated package from its folder (under a name unique to the folder, so two
    packages load side by side)."""
    root = Path(folder).resolve()
    read_manifest(root)
    # keyed by the folder and its kernels' text: a package rewritten in place loads anew
    stamp = str(root) + (root / "kernels.py").read_text() + (root / "runner.py").read_text()
    name = "autotune_generated_" + hashlib.sha256(stamp.encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)]
    )
    if spec is None or spec.loader is None:
        raise CodegenError(f"cannot import the package in '{folder}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def run_package(folder: str | Path, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The package's outputs by name for ``inputs`` by name.

    Raises:
        CodegenError: an input missing, unknown, or of the wrong shape or type (named).
    """
    module = load_package(folder)
    try:
        module.runner.check_inputs(inputs, module.INPUTS)
    except ValueError as err:
        raise CodegenError(str(err)) from None
    result: dict[str, np.ndarray] = module.run(inputs)
    return result
