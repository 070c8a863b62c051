"""Shape ranges and their buckets: a served model's dynamic dims, each over ``LO..HI``.

A dim's buckets are the upper edges of the intervals its values fall in: with edges
``16, 32, 64`` a value of 20 runs with the configs of bucket 32, the next edge at or above it
(a shape between buckets is padded up to the next one, as a serving engine's graph buckets
are). The last edge is the range's top, so every value in range has a bucket; the first is
the smallest edge at or above ``LO``. Several dims bucket independently and a bucket of the
model is one edge per dim (their product).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from search_space.exceptions import AutofusionError

__all__ = [
    "Bucket",
    "DimRange",
    "ShapeRangeError",
    "ShapeRanges",
    "dims_label",
    "parse_buckets",
    "parse_range",
    "pow2_edges",
]

RANGE_FORMAT = "NAME=LO..HI, e.g. seq=16..512"
BUCKETS_FORMAT = "pow2, or NAME=E1,E2,... with increasing edges ending at the range's top"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ShapeRangeError(AutofusionError):
    """A shape range, bucket list or traffic file that cannot be used (the message says
    which, and the form it takes)."""


@dataclass(frozen=True, slots=True)
class DimRange:
    """One dynamic dim (by its ONNX ``dim_param``, or a zoo model's batch, seq or cache) and
    the values it takes, ``lo <= value <= hi``."""

    name: str
    lo: int
    hi: int

    def __str__(self) -> str:
        return f"{self.name}={self.lo}..{self.hi}"


def parse_range(text: str) -> DimRange:
    """``NAME=LO..HI`` (``--shape-range``).

    Raises:
        ShapeRangeError: not of that form, LO < 1 or LO > HI.
    """
    name, sep, span = text.partition("=")
    lo_text, dots, hi_text = span.partition("..")
    name = name.strip()
    if not (sep and dots and _NAME.match(name) and _is_count(lo_text) and _is_count(hi_text)):
        raise ShapeRangeError(f"--shape-range {text!r} is not {RANGE_FORMAT}")
    lo, hi = int(lo_text), int(hi_text)
    if lo < 1:
        raise ShapeRangeError(f"--shape-range {text!r}: LO must be at least 1")
    if lo > hi:
        raise ShapeRangeError(
            f"--shape-range {text!r}: LO {lo} is above HI {hi}; write {name}={hi}..{lo}"
        )
    return DimRange(name, lo, hi)


def _is_count(text: str) -> bool:
    return text.strip().isdigit()


def pow2_edges(lo: int, hi: int) -> tuple[int, ...]:
    """The powers of two from the first at or above ``lo`` up to ``hi``, and ``hi`` itself
    when it is not one (``3..100``: 4, 8, 16, 32, 64, 100)."""
    first = 1 << max(0, (lo - 1).bit_length())
    edges = list(itertools.takewhile(lambda e: e <= hi, (first << k for k in itertools.count())))
    return tuple(edges) if edges and edges[-1] == hi else (*edges, hi)


def parse_buckets(texts: Sequence[str], ranges: Sequence[DimRange]) -> dict[str, tuple[int, ...]]:
    """Every ranged dim's bucket edges: ``pow2`` (the default) for each dim no ``NAME=E1,E2,...``
    names (``--buckets``, given once per dim).

    Raises:
        ShapeRangeError: a list for a dim with no range, a dim listed twice, edges not
            increasing, outside the range, or not ending at its top.
    """
    by_name = {r.name: r for r in ranges}
    edges = {r.name: pow2_edges(r.lo, r.hi) for r in ranges}
    listed: set[str] = set()
    for text in texts:
        if text.strip() == "pow2":
            continue
        name, sep, values = text.partition("=")
        name = name.strip()
        parts = [v.strip() for v in values.split(",")]
        if not (sep and _NAME.match(name) and parts and all(p.isdigit() for p in parts)):
            raise ShapeRangeError(f"--buckets {text!r} is not {BUCKETS_FORMAT}")
        if name not in by_name:
            known = ", ".join(by_name) or "none"
            raise ShapeRangeError(
                f"--buckets {text!r} names {name!r}, which has no --shape-range (ranged: {known})"
            )
        if name in listed:
            raise ShapeRangeError(f"--buckets lists {name!r} twice; give one list per dim")
        listed.add(name)
        edges[name] = _checked_edges(text, [int(p) for p in parts], by_name[name])
    return edges


def _checked_edges(text: str, values: list[int], r: DimRange) -> tuple[int, ...]:
    """A dim's listed edges: increasing (no empty bucket), inside its range, ending at HI."""
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise ShapeRangeError(
            f"--buckets {text!r}: edges must increase (a repeated or falling edge makes an "
            "empty or overlapping bucket)"
        )
    if values[0] < r.lo or values[-1] > r.hi:
        raise ShapeRangeError(f"--buckets {text!r}: every edge must lie in the range {r}")
    if values[-1] != r.hi:
        raise ShapeRangeError(
            f"--buckets {text!r}: the last edge must be the range's top {r.hi}, or shapes "
            f"above {values[-1]} would have no bucket; append {r.hi}"
        )
    return tuple(values)


def dims_label(dims: Iterable[tuple[str, int]]) -> str:
    """``batch=4,seq=128``: a bucket's name in tables and plan files."""
    return ",".join(f"{k}={v}" for k, v in dims)


@dataclass(frozen=True, slots=True)
class Bucket:
    """One concrete instance of the model: an edge per ranged dim, and its share of the
    traffic (the weight of its latency in the study's objective)."""

    dims: tuple[tuple[str, int], ...]
    weight: float

    @property
    def values(self) -> dict[str, int]:
        return dict(self.dims)

    @property
    def label(self) -> str:
        return dims_label(self.dims)


@dataclass(frozen=True)
class ShapeRanges:
    """Ranged dims with their bucket edges (:func:`parse_buckets`)."""

    ranges: tuple[DimRange, ...]
    edges: Mapping[str, tuple[int, ...]]

    @classmethod
    def parse(cls, ranges: Iterable[str], buckets: Sequence[str] = ()) -> ShapeRanges:
        """From the command line's ``--shape-range`` and ``--buckets`` values.

        Raises:
            ShapeRangeError: a malformed range or bucket list, or a dim ranged twice.
        """
        parsed = tuple(parse_range(t) for t in ranges)
        names = [r.name for r in parsed]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ShapeRangeError(
                f"--shape-range gives {twice[0]!r} twice; give one range per dim"
            )
        return cls(parsed, parse_buckets(buckets, parsed))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.ranges)

    def keys(self) -> list[tuple[tuple[str, int], ...]]:
        """Every bucket's dims, the last dim varying fastest."""
        names = self.names
        return [
            tuple(zip(names, combo, strict=True))
            for combo in itertools.product(*(self.edges[n] for n in names))
        ]

    def bucket_of(self, values: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
        """The bucket a concrete shape runs in: each dim's next edge at or above its value.

        Raises:
            ShapeRangeError: a ranged dim missing, or a value outside its range.
        """
        out = []
        for r in self.ranges:
            if r.name not in values:
                raise ShapeRangeError(f"no value for the ranged dim {r.name!r} ({r})")
            v = int(values[r.name])
            if not r.lo <= v <= r.hi:
                raise ShapeRangeError(
                    f"{r.name}={v} is outside the range {r}; tune with a range that holds it"
                )
            out.append((r.name, next(e for e in self.edges[r.name] if e >= v)))
        return tuple(out)

    def buckets(
        self, counts: Mapping[tuple[tuple[str, int], ...], float] | None = None
    ) -> tuple[Bucket, ...]:
        """Every bucket with its weight: its share of ``counts`` (observed shapes per bucket,
        :func:`search_space.shapes.traffic.read_traffic`), or an equal share without them."""
        keys = self.keys()
        if not counts:
            return tuple(Bucket(k, 1.0 / len(keys)) for k in keys)
        total = float(sum(counts.values()))
        return tuple(Bucket(k, float(counts.get(k, 0.0)) / total) for k in keys)
