"""Atomic file writes shared by every package: temp file in the same folder, then rename."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
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
    "refuse_inputs",
    "same_file",
    "write_error",
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
    kind: str | None = None,
    force: bool = False,
) -> Path:
    """Check that ``path`` can be written as a file, and is none of the run's ``inputs``
    (label -> path: the model, the plan, the study's storage...), which writing it would
    destroy. With ``kind`` (of :data:`~search_space.file_kind.KINDS`: what is written), an
    existing file of another kind (told by its content; an ONNX model only one this tool
    wrote) is refused too, unless ``force``.

    Raises:
        OutputError: the path is a folder or not a regular file (a device, a pipe), its folder
            does not exist, is a file or is read-only, it is one of ``inputs``, or (without
            ``force``) an existing file of another kind.
    """
    out = Path(path)
    if out.exists() and out.is_dir():
        raise OutputError(f"output path '{out}' is a folder; give a file name inside it")
    if out.exists() and not out.is_file():
        raise OutputError(
            f"output '{out}' is not a regular file ({_what(out)}), which the tool never writes "
            "to; give a file path"
        )
    _check_folder(out)
    refuse_inputs(out, inputs)
    if kind is not None and not force:
        _check_kind(out, kind)
    return out


def _check_folder(out: Path) -> None:
    if not out.parent.exists():
        raise OutputError(f"output folder '{out.parent}' does not exist; create it first")
    if not out.parent.is_dir():
        raise OutputError(f"output folder '{out.parent}' is a file, not a folder; fix the path")
    if _read_only(out.parent):
        raise OutputError(
            f"output folder '{out.parent}' is on a read-only file system; give a writable path"
        )
    if not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise OutputError(f"output '{out}' cannot be written (no permission); pick another path")


def refuse_inputs(
    out: str | os.PathLike[str], inputs: Mapping[str, str | os.PathLike[str] | None] | None
) -> None:
    """Refuse an output that is one of the run's ``inputs`` (label -> path), whatever
    ``--force`` says: the run reads it.

    Raises:
        OutputError: naming the input.
    """
    for label, src in (inputs or {}).items():
        if src is not None and same_file(out, src):
            raise OutputError(
                f"output '{out}' is the {label}: writing it would destroy it; give another path"
            )


# an output kind may replace an existing file of these kinds
SAME_KIND = {"cost_model": {"cost_model", "gzip"}, "onnx": {"tool_onnx"}}


def _check_kind(out: Path, kind: str) -> None:
    """An existing file of another kind than ``kind``, or a name a study's storage goes by."""
    from search_space.file_kind import KINDS, file_kind

    have = file_kind(out)
    if have is not None and have not in SAME_KIND.get(kind, {kind}):
        what = f"{KINDS[have]}, not {KINDS[kind]}"
        if have == kind:
            what = f"{KINDS[have]} this tool did not write"
        raise OutputError(
            f"output '{out}' is {what}: writing it would destroy it; give another path, or "
            "pass --force to replace it"
        )
    if have is None and kind != "journal" and out.suffix == ".journal":
        raise OutputError(
            f"output '{out}' names a study's storage (.journal); give another path, or pass "
            "--force to write it anyway"
        )


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _what(path: Path) -> str:
    mode = path.stat().st_mode
    for test, name in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a pipe"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename:
    the old file stays whole until the new one is on disk.

    Raises:
        OutputError: as :func:`output_path`, or the write failed (a full disk, an I/O error),
            one line; the temporary file is removed.
    """
    out = output_path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as exc:
        raise write_error(out, exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())  # the bytes are on disk before the name points at them
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file is a normal file
        os.replace(tmp, out)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise write_error(out, exc) from None
        raise
    return out


def write_error(out: Path, exc: OSError) -> OutputError:
    """One line for a write that failed (``exc``), saying the old file is left whole."""
    old = "the old file is left as it was" if out.exists() else "nothing was written"
    hint = "free some space or give another path"
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        hint = "give another path"
    reason = exc.strerror or type(exc).__name__
    return OutputError(f"cannot write '{out}': {reason} ({old}); {hint}")


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
