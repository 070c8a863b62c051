"""Atomic file writes shared by every package: temp file in the same folder, then rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from search_space.exceptions import AutofusionError

__all__ = [
    "OutputError",
    "atomic_write_bytes",
    "atomic_write_text",
    "file_head",
    "output_path",
    "same_file",
]


class OutputError(AutofusionError):
    """An output file cannot be written where the user asked."""


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file (links and ``..`` resolved)."""
    try:
        if Path(a).exists() and Path(b).exists():
            return os.path.samefile(a, b)
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):  # a symbolic link loop
        return False


def output_path(
    path: str | os.PathLike[str],
    inputs: Mapping[str, str | os.PathLike[str] | None] | None = None,
) -> Path:
    """Check that ``path`` can be written as a file, and is none of the run's ``inputs``
    (label -> path: the model, the plan, the study's storage...), which writing it would
    destroy.

    Raises:
        OutputError: the path is a folder, its folder does not exist or is a file, or it is
            one of ``inputs``.
    """
    out = Path(path)
    if out.exists() and out.is_dir():
        raise OutputError(f"output path '{out}' is a folder; give a file name inside it")
    if not out.parent.exists():
        raise OutputError(f"output folder '{out.parent}' does not exist; create it first")
    if not out.parent.is_dir():
        raise OutputError(f"output folder '{out.parent}' is a file, not a folder; fix the path")
    if not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise OutputError(f"output '{out}' cannot be written (no permission); pick another path")
    for label, src in (inputs or {}).items():
        if src is not None and same_file(out, src):
            raise OutputError(
                f"output '{out}' is the {label}: writing it would destroy it; give another path"
            )
    return out


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    out = output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())  # the bytes are on disk before the name points at them
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


def file_head(path: str | os.PathLike[str], n: int) -> bytes:
    """The first ``n`` bytes of a file (what kind of file it is); empty for a file that is
    missing or empty."""
    p = Path(path)
    if not p.is_file():
        return b""
    with p.open("rb") as fh:
        return fh.read(n)
