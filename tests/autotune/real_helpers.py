"""Shared by the real-row tests: one real-data row built from its cells."""

from __future__ import annotations

from costmodel.measure.real import RealRow, parse_row


def real_row(op: str, shapes: str, dtype: str = "fp32", **cells: str) -> RealRow:
    """A row of a real-data CSV timed at 5 us on a 910B4; ``cells`` adds or overrides columns."""
    return parse_row(
        1,
        "t.csv",
        {"chip": "910B4", "op": op, "shapes": shapes, "dtype": dtype, "time_us": "5.0", **cells},
    )
