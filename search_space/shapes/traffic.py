"""A traffic file: the shapes a served model saw, with how often, that weight its buckets.

CSV with a header naming every ranged dim and ``count``, one observed shape per line::

    batch,seq,count
    1,128,5200
    8,512,310

Each line's count goes to the bucket its shape runs in (:meth:`ShapeRanges.bucket_of`);
several lines may fall in one bucket. The file is read as text, never evaluated.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from search_space.shapes.ranges import ShapeRangeError, ShapeRanges

__all__ = ["read_traffic"]

COUNT = "count"


def read_traffic(path: Path, ranges: ShapeRanges) -> dict[tuple[tuple[str, int], ...], float]:
    """Observed counts per bucket.

    Raises:
        ShapeRangeError: an unreadable file, a header naming an unknown dim or missing a
            ranged one or ``count``, a line that is not numbers, a negative or non-finite
            count, a shape outside its range, or no count at all.
    """
    try:
        with path.open(newline="", encoding="utf-8") as f:
            lines = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ShapeRangeError(f"--traffic {path}: cannot read it as CSV ({err})") from None
    if not lines:
        raise ShapeRangeError(f"--traffic {path} is empty; it needs a header: {_header(ranges)}")
    head = [h.strip() for h in lines[0]]
    _check_header(path, head, ranges)
    counts: dict[tuple[tuple[str, int], ...], float] = {}
    for number, cells in enumerate(lines[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        key, count = _line(path, number, head, cells, ranges)
        counts[key] = counts.get(key, 0.0) + count
    if not sum(counts.values()) > 0:
        raise ShapeRangeError(
            f"--traffic {path} counts no shape; give at least one positive count"
        )
    return counts


def _header(ranges: ShapeRanges) -> str:
    return ",".join((*ranges.names, COUNT))


def _check_header(path: Path, head: Sequence[str], ranges: ShapeRanges) -> None:
    unknown = [h for h in head if h != COUNT and h not in ranges.names]
    if unknown:
        raise ShapeRangeError(
            f"--traffic {path}: column {unknown[0]!r} is not a ranged dim (ranged: "
            f"{', '.join(ranges.names)}); the header is {_header(ranges)}"
        )
    missing = [n for n in (*ranges.names, COUNT) if n not in head]
    if missing:
        raise ShapeRangeError(
            f"--traffic {path}: no column {missing[0]!r}; the header is {_header(ranges)}"
        )
    if len(set(head)) != len(head):
        raise ShapeRangeError(f"--traffic {path}: a column is named twice in {','.join(head)}")


def _line(
    path: Path, number: int, head: Sequence[str], cells: Sequence[str], ranges: ShapeRanges
) -> tuple[tuple[tuple[str, int], ...], float]:
    """One line's bucket and count."""
    where = f"--traffic {path}, line {number}"
    if len(cells) != len(head):
        raise ShapeRangeError(f"{where}: {len(cells)} cells under {len(head)} columns")
    row = dict(zip(head, (c.strip() for c in cells), strict=True))
    try:
        count = float(row[COUNT])
        values = {n: int(row[n]) for n in ranges.names}
    except ValueError:
        raise ShapeRangeError(
            f"{where}: {','.join(cells)!r} is not whole dims and a count"
        ) from None
    if not (math.isfinite(count) and count >= 0):
        raise ShapeRangeError(f"{where}: count {row[COUNT]} must be a finite number >= 0")
    try:
        return ranges.bucket_of(values), count
    except ShapeRangeError as err:
        raise ShapeRangeError(f"{where}: {err}") from None
