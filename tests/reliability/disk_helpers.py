"""Real full disks and read-only folders for the output cases: a small tmpfs mounted on a
case's folder, filled to its last byte or remounted read-only, unmounted after (root only;
CI runs as root)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cannot_mount", "fill", "read_only", "small_disk"]


def cannot_mount() -> str | None:
    """Why a tmpfs cannot be mounted here (None when it can)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (CI runs as root)"
    return None


def _run(*argv: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode:
        raise OSError(f"{' '.join(argv)}: {res.stderr.strip()}")


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``folder`` (made here) for the block; unmounted after,
    whatever happens."""
    folder.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(folder))
    try:
        yield folder
    finally:
        try:
            _run("umount", str(folder))
        except OSError:
            _run("umount", "-l", str(folder))  # something still holds it: detach it


def fill(folder: Path) -> None:
    """Fill the file system of ``folder`` to its last byte (a file of zeros)."""
    block = b"\0" * 4096
    with (folder / "fill").open("wb", buffering=0) as fh:
        while True:
            try:
                fh.write(block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    for n in (512, 64, 1):  # a partial block may still fit
        with contextlib.suppress(OSError), (folder / "fill").open("ab", buffering=0) as fh:
            while True:
                fh.write(b"\0" * n)


def read_only(folder: Path) -> None:
    """Remount the tmpfs on ``folder`` read-only."""
    _run("mount", "-o", "remount,ro", str(folder))
