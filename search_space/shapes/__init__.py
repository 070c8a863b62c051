"""Shape ranges: a model's dynamic dims over ``LO..HI``, their buckets, the traffic that
weights them, and one concrete graph per bucket (docs/tuning.md, "Shape ranges")."""

from __future__ import annotations

from search_space.shapes.instances import (
    BucketGraphs,
    OnnxShapes,
    ShapeSource,
    ZooShapes,
    bucket_graphs,
    shape_source,
)
from search_space.shapes.ranges import (
    Bucket,
    DimRange,
    ShapeRangeError,
    ShapeRanges,
    parse_buckets,
    parse_range,
    pow2_edges,
)
from search_space.shapes.representatives import representatives
from search_space.shapes.traffic import read_traffic

__all__ = [
    "Bucket",
    "BucketGraphs",
    "DimRange",
    "OnnxShapes",
    "ShapeRangeError",
    "ShapeRanges",
    "ShapeSource",
    "ZooShapes",
    "bucket_graphs",
    "parse_buckets",
    "parse_range",
    "pow2_edges",
    "read_traffic",
    "representatives",
    "shape_source",
]
