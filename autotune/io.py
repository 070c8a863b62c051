"""Saving models atomically: a failed command never leaves a half-written output file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx

from search_space.atomic import atomic_write_bytes, output_path

__all__ = ["atomic_write_bytes", "save_model"]

# Protobuf cannot serialise a message of 2 GiB or more; larger models keep weights outside.
_PROTO_LIMIT = (1 << 31) - (64 << 20)


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    """Save an ONNX model atomically; past protobuf's 2 GiB limit weights go to ``<file>.data``."""
    out = output_path(path)
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
