"""Atomic file writes shared by every package: temp file in the same folder, then rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from search_space.exceptions import AutofusionError

__all__ = ["OutputError", "atomic_write_bytes", "atomic_write_text", "output_path"]


class OutputError(AutofusionError):
    """An output file cannot be written where the user asked."""


def output_path(path: str | os.PathLike[str]) -> Path:
    """Check that ``path`` can be written as a file.

    Raises:
        OutputError: the path is a folder, or its folder does not exist.
    """
    out = Path(path)
    if out.exists() and out.is_dir():
        raise OutputError(f"output path '{out}' is a folder; give a file name inside it")
    if not out.parent.exists():
        raise OutputError(f"output folder '{out.parent}' does not exist; create it first")
    return out


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    out = output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file is a normal file
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))
