"""Shared by the experiment scripts: print rows as a table and write them as CSV."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def emit(rows: Sequence[dict[str, Any]], path: str | Path, width: int = 12) -> Path:
    """Print ``rows`` (dicts with the same keys) as an aligned table, then write CSV."""
    cols = list(rows[0])
    print(" | ".join(f"{c:>{width}}" for c in cols))
    for row in rows:
        print(" | ".join(f"{row.get(c, '')!s:>{width}}" for c in cols))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {out}")
    return out
