"""The buckets a range study searches on: a few that stand for all of them.

Scoring and simulating every trial at every bucket makes a study over 42 buckets cost 42
studies. Neighbouring buckets favour the same fusions (their shapes differ by a factor of
two), so the search weighs a few representative buckets, each carrying the traffic of the
buckets nearest it, and only the last candidates are measured at every bucket. The
representatives are a weighted k-medoids of the buckets in log2 space (each dim scaled to its
range), the top bucket always one of them (the study's graph is its); deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from search_space.shapes.ranges import Bucket, ShapeRanges

__all__ = ["representatives"]

ROUNDS = 20  # k-medoids rounds at most (it settles in a few)


def _points(buckets: Sequence[Bucket], ranges: ShapeRanges) -> list[tuple[float, ...]]:
    """Each bucket as a point: its dims in log2, each scaled to [0, 1] over its range."""
    span = {
        r.name: max(math.log2(r.hi) - math.log2(ranges.edges[r.name][0]), 1e-9)
        for r in ranges.ranges
    }
    low = {r.name: math.log2(ranges.edges[r.name][0]) for r in ranges.ranges}
    return [tuple((math.log2(v) - low[k]) / span[k] for k, v in b.dims) for b in buckets]


def _nearest(
    p: tuple[float, ...], medoids: Sequence[int], pts: Sequence[tuple[float, ...]]
) -> int:
    return min(medoids, key=lambda m: (math.dist(p, pts[m]), m))


def representatives(buckets: Sequence[Bucket], ranges: ShapeRanges, k: int) -> dict[int, float]:
    """Up to ``k`` buckets (by index) that stand for all, each with the weight of the buckets
    nearest it (the weights still sum to the buckets'); every bucket when ``k`` is at least
    their number. The last bucket (the top) is always one.

    Raises:
        ValueError: ``k`` < 1.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, not {k}")
    n = len(buckets)
    if k >= n:
        return {i: b.weight for i, b in enumerate(buckets)}
    pts = _points(buckets, ranges)
    medoids = [n - 1]
    while len(medoids) < k:  # farthest-first start, weighted so traffic pulls a medoid near
        far = max(
            (i for i in range(n) if i not in medoids),
            key=lambda i: (
                min(math.dist(pts[i], pts[m]) for m in medoids) * (0.5 + buckets[i].weight * n),
                -i,
            ),
        )
        medoids.append(far)
    for _ in range(ROUNDS):
        clusters: dict[int, list[int]] = {m: [] for m in medoids}
        for i in range(n):
            clusters[_nearest(pts[i], medoids, pts)].append(i)
        moved = [n - 1] + [
            _medoid(members, pts, buckets) for m, members in clusters.items() if m != n - 1
        ]
        if sorted(moved) == sorted(medoids):
            break
        medoids = list(dict.fromkeys(moved))
    weights = dict.fromkeys(medoids, 0.0)
    for i in range(n):
        weights[_nearest(pts[i], medoids, pts)] += buckets[i].weight
    return dict(sorted(weights.items()))


def _medoid(
    members: Sequence[int], pts: Sequence[tuple[float, ...]], buckets: Sequence[Bucket]
) -> int:
    """The member closest, weighted by traffic, to the cluster's others (an empty-traffic
    cluster by plain distance)."""
    total = sum(buckets[j].weight for j in members)

    def cost(i: int) -> tuple[float, int]:
        w = [buckets[j].weight if total > 0 else 1.0 for j in members]
        return sum(wj * math.dist(pts[i], pts[j]) for wj, j in zip(w, members, strict=True)), i

    return min(members, key=cost)
