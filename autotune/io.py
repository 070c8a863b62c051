"""Atomic writes: a failed command never leaves a half-written output file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import onnx

from .exceptions import OutputError

__all__ = ["atomic_write_bytes", "save_model"]

# Protobuf cannot serialise a message of 2 GiB or more; larger models keep weights outside.
_PROTO_LIMIT = (1 << 31) - (64 << 20)


def _target(path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    if out.exists() and out.is_dir():
        raise OutputError(f"output path '{out}' is a folder; give a file name, e.g. {out}/x.onnx")
    if not out.parent.exists():
        raise OutputError(f"output folder '{out.parent}' does not exist; create it first")
    return out


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    out = _target(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return out


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    """Save an ONNX model atomically; past protobuf's 2 GiB limit weights go to ``<file>.data``."""
    out = _target(path)
    if model.ByteSize() < _PROTO_LIMIT:
        return atomic_write_bytes(out, model.SerializeToString())
    data_name = out.name + ".data"
    with tempfile.TemporaryDirectory(prefix=".autotune-", dir=out.parent) as tmp:
        staged = Path(tmp) / out.name
        onnx.save_model(
            model,
            str(staged),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data_name,
        )
        os.replace(Path(tmp) / data_name, out.parent / data_name)
        os.replace(staged, out)
    return out
