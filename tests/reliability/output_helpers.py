"""What an output case (:mod:`cases_output`) needs around its run: the files it writes over,
put in its folder first; its small disk, full or read-only; after the run, whether the files
it must keep are whole, whether it left a temporary file, and whether a control character
reached the terminal."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from disk_helpers import cannot_mount, fill, read_only, small_disk

__all__ = ["broken_files", "digests", "prepared", "raw_controls", "temp_files"]

# what must never reach a terminal raw: C0 controls but tab and newline, DEL, C1 controls,
# and bytes that are not UTF-8 (CliRunner decodes them as U+FFFD; a raw 0x9b is a CSI)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffd]")


@contextlib.contextmanager
def prepared(case: Any, corpus: dict[str, Path], tmp: Path) -> Iterator[str | None]:
    """Set up ``case`` in ``tmp``: its disk (``{tmp}/disk``, a tmpfs) and the corpus files it
    copies in; yields why it cannot run here (None: it runs), and unmounts the disk after."""
    disk = getattr(case, "disk", "")
    reason = cannot_mount() if disk else None
    if reason:
        yield reason
        return
    with small_disk(tmp / "disk") if disk else contextlib.nullcontext(tmp):
        for name, dest in getattr(case, "copies", ()):
            shutil.copyfile(corpus[name], Path(dest.format(tmp=tmp)))
        if disk == "full":
            fill(tmp / "disk")
        elif disk == "ro":
            read_only(tmp / "disk")
        yield None


def digests(case: Any, tmp: Path) -> dict[str, bytes]:
    """The bytes of each file ``case`` must keep (``kept`` and ``appended``)."""
    names = (*getattr(case, "kept", ()), *getattr(case, "appended", ()))
    return {n: Path(n.format(tmp=tmp)).read_bytes() for n in names}


def broken_files(case: Any, tmp: Path, before: dict[str, bytes]) -> list[str]:
    """The files ``case`` had to keep that are not whole: a ``kept`` file not byte for byte
    as before, an ``appended`` one (a journal) not its old bytes then whole lines."""
    broken = []
    for name in getattr(case, "kept", ()):
        if Path(name.format(tmp=tmp)).read_bytes() != before[name]:
            broken.append(name)
    for name in getattr(case, "appended", ()):
        now = Path(name.format(tmp=tmp)).read_bytes()
        if not now.startswith(before[name]) or not _whole_lines(now[len(before[name]) :]):
            broken.append(name)
    return broken


def _whole_lines(data: bytes) -> bool:
    """Whether ``data`` is whole JSON records, one a line (what a journal appends)."""
    if data and not data.endswith(b"\n"):
        return False
    try:
        return all(json.loads(line) is not None for line in data.splitlines())
    except ValueError:
        return False


def temp_files(tmp: Path) -> list[str]:
    """Temporary files a write left in ``tmp`` (``.<name>.*.tmp``, a staging folder)."""
    staged = (p for p in tmp.rglob(".*") if p.name.endswith(".tmp") or ".autotune-" in p.name)
    return sorted(str(p) for p in staged)


def raw_controls(text: str) -> list[str]:
    """The control characters in ``text`` that would act on a terminal."""
    return sorted(set(_CONTROL.findall(text)))
