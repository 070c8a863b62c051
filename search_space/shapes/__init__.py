"""Shape ranges: a model's dynamic dims over ``LO..HI``, their buckets, the traffic that
weights them, and one concrete graph per bucket (docs/tuning.md, "Shape ranges").

The bucket graphs (:mod:`.instances`) are imported on first use: they read models (onnx, the
zoo), which reading a plan file (it names its ranges) need not pay for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from search_space.shapes.locate import (
    DimAxis,
    axes_from_json,
    axes_json,
    dim_axes,
    dims_of,
    structure_digest,
)
from search_space.shapes.ranges import (
    Bucket,
    DimRange,
    ShapeRangeError,
    ShapeRanges,
    dims_label,
    parse_buckets,
    parse_range,
    pow2_edges,
)
from search_space.shapes.representatives import representatives
from search_space.shapes.traffic import read_traffic

if TYPE_CHECKING:
    from search_space.shapes.instances import (
        BucketGraphs,
        OnnxShapes,
        ShapeSource,
        ZooShapes,
        bucket_graphs,
        load_buckets,
        shape_source,
        zoo_at,
    )

__all__ = [
    "Bucket",
    "BucketGraphs",
    "DimAxis",
    "DimRange",
    "OnnxShapes",
    "ShapeRangeError",
    "ShapeRanges",
    "ShapeSource",
    "ZooShapes",
    "axes_from_json",
    "axes_json",
    "bucket_graphs",
    "dim_axes",
    "dims_label",
    "dims_of",
    "load_buckets",
    "parse_buckets",
    "parse_range",
    "pow2_edges",
    "read_traffic",
    "representatives",
    "shape_source",
    "structure_digest",
    "zoo_at",
]

_INSTANCES = frozenset(
    {
        "BucketGraphs",
        "OnnxShapes",
        "ShapeSource",
        "ZooShapes",
        "bucket_graphs",
        "load_buckets",
        "shape_source",
        "zoo_at",
    }
)


def __getattr__(name: str) -> object:
    """The bucket graphs' names, from :mod:`.instances` on first use."""
    if name not in _INSTANCES:
        raise AttributeError(f"module 'search_space.shapes' has no attribute '{name}'")
    value = getattr(importlib.import_module("search_space.shapes.instances"), name)
    globals()[name] = value
    return value
