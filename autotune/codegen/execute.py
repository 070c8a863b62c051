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

__all__ = ["import_path", "load_package", "read_manifest", "run_package"]


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
    return import_path(name, root / "__init__.py", package_dir=root)


def import_path(name: str, path: Path, package_dir: Path | None = None) -> ModuleType:
    """The file ``path`` imported as module ``name`` (a package when ``package_dir`` is its
    folder, so its relative imports resolve); registered in ``sys.modules`` while its code runs,
    and removed again if that code raises.

    Raises:
        ImportError: the file cannot be read as a module.
    """
    search = [str(package_dir)] if package_dir is not None else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=search)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import '{path}'")
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
