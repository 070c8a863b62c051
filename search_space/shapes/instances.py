"""A model over shape ranges: its dynamic dims, and one concrete graph per bucket.

The model stays symbolic; each bucket is an instance of it at the bucket's edges: an ONNX
file loaded with its ``dim_param`` dims bound (a dim written as arithmetic of names, such as
``past + 1``, computed from them), or a zoo model built at that batch, sequence or cache
length. Every instance must be the same graph up to shapes (the same ops, by name and type,
in the same order): one set of fusion decisions holds for all of them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from search_space.ir import Graph
from search_space.onnx import ModelSource, declared_dims, load_graph, read_model
from search_space.onnx.dims import bound_dim, dim_names
from search_space.onnx.loader import WEIGHT_INPUTS_KEY
from search_space.shapes.locate import DimAxis, dim_axes
from search_space.shapes.ranges import Bucket, ShapeRangeError, ShapeRanges
from search_space.shapes.traffic import read_traffic
from search_space.zoo import ZooOptions, load_model_spec, model_axes

__all__ = [
    "BucketGraphs",
    "OnnxShapes",
    "ShapeSource",
    "ZooShapes",
    "bucket_graphs",
    "shape_source",
]


class ShapeSource(Protocol):
    """A model whose dynamic dims can be bound: what :func:`bucket_graphs` needs."""

    def dynamic_dims(self) -> tuple[str, ...]: ...

    def graph(self, values: Mapping[str, int]) -> Graph: ...


@dataclass(frozen=True)
class OnnxShapes:
    """An ONNX model's named dynamic dims (``dim_param``), bound per bucket; ``fixed`` are
    the ``--input-shape`` shapes of inputs no range covers."""

    source: ModelSource
    fixed: Mapping[str, Sequence[int]] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def _inputs(self) -> dict[str, list[int | str]]:
        """Fed graph inputs (not initializers, not weights stood in as inputs) with their
        declared dims (the model read once, not once per bucket)."""
        model, _ = read_model(self.source)
        meta = {p.key: p.value for p in model.metadata_props}
        skip = {t.name for t in model.graph.initializer} | set(_weights(meta))
        return {
            vi.name: declared_dims(vi) or []
            for vi in model.graph.input
            if vi.name not in skip and vi.name not in self.fixed
        }

    def dynamic_dims(self) -> tuple[str, ...]:
        names: dict[str, None] = {}
        for dims in self._inputs.values():
            for d in dims:
                names.update(dict.fromkeys(sorted(dim_names(d))))
        return tuple(names)

    def graph(self, values: Mapping[str, int]) -> Graph:
        """The model with its dims bound to ``values`` (an input a name of which has no
        value is left for the loader, which asks for its shape)."""
        shapes: dict[str, Sequence[int]] = dict(self.fixed)
        for name, dims in self._inputs.items():
            bound = [bound_dim(d, values) for d in dims]
            if dims and all(b is not None for b in bound):
                shapes[name] = tuple(int(b) for b in bound if b is not None)
        return load_graph(self.source, input_shapes=shapes)


def _weights(meta: Mapping[str, str]) -> list[str]:
    return list(json.loads(meta.get(WEIGHT_INPUTS_KEY, "[]")))


@dataclass(frozen=True)
class ZooShapes:
    """A zoo model built at each bucket's batch, sequence or cache length."""

    name: str
    options: ZooOptions = dataclasses.field(default_factory=ZooOptions)

    def dynamic_dims(self) -> tuple[str, ...]:
        return model_axes(self.name)

    def options_at(self, values: Mapping[str, int]) -> ZooOptions:
        """The zoo options that build the model at ``values``."""
        o = self.options
        return dataclasses.replace(
            o,
            batch=values.get("batch", o.batch),
            seq_len=values.get("seq", o.seq_len),
            cache_len=values.get("cache", o.cache_len),
        )

    def graph(self, values: Mapping[str, int]) -> Graph:
        return load_model_spec(f"zoo:{self.name}", zoo=self.options_at(values))


def shape_source(
    model: str | ModelSource,
    zoo: ZooOptions | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> OnnxShapes | ZooShapes:
    """MODEL (a path, a ModelProto or ``zoo:NAME``) as a source of bucket graphs."""
    if isinstance(model, str) and model.startswith("zoo:"):
        return ZooShapes(model[4:], zoo or ZooOptions())
    return OnnxShapes(model, dict(input_shapes or {}))


def zoo_at(
    model: str | ModelSource, zoo: ZooOptions | None, values: Mapping[str, int]
) -> ZooOptions | None:
    """The zoo options that build MODEL at a bucket's ``values`` (``zoo`` as given for a file:
    its graph is bound by its inputs)."""
    if isinstance(model, str) and model.startswith("zoo:"):
        return ZooShapes(model[4:], zoo or ZooOptions()).options_at(values)
    return zoo


def load_buckets(
    source: ShapeSource,
    ranges: Sequence[str],
    buckets: Sequence[str] = (),
    traffic: Path | None = None,
) -> BucketGraphs:
    """MODEL at every bucket of the ``--shape-range``s, cut by ``--buckets`` and weighted by
    ``--traffic`` (what ``tune`` and ``estimate`` take, and ``autotune.tune``).

    Raises:
        ShapeRangeError: what :meth:`ShapeRanges.parse`, :func:`read_traffic` and
            :func:`bucket_graphs` raise.
    """
    parsed = ShapeRanges.parse(ranges, buckets)
    counts = None if traffic is None else read_traffic(traffic, parsed)
    return bucket_graphs(source, parsed, counts)


@dataclass(frozen=True)
class BucketGraphs:
    """The buckets of a model over its ranges, each with its concrete graph (the same ops
    in each)."""

    ranges: ShapeRanges
    buckets: tuple[Bucket, ...]
    graphs: tuple[Graph, ...]
    axes: tuple[DimAxis, ...] = ()  # where each ranged dim shows in the inputs (a plan's key)

    def __len__(self) -> int:
        return len(self.buckets)

    @property
    def reference(self) -> Graph:
        """The graph of the top bucket, whose op names every bucket shares."""
        return self.graphs[-1]


def bucket_graphs(
    source: ShapeSource,
    ranges: ShapeRanges,
    counts: Mapping[tuple[tuple[str, int], ...], float] | None = None,
) -> BucketGraphs:
    """Every bucket's graph (:meth:`ShapeRanges.buckets`, weighted by ``counts``).

    Raises:
        ShapeRangeError: a range on a dim the model does not have as dynamic, a bucket whose
            graph differs from the others beyond its shapes, or a dim no input axis follows.
    """
    dynamic = source.dynamic_dims()
    for r in ranges.ranges:
        if r.name not in dynamic:
            have = ", ".join(dynamic) or "none (every dim is static)"
            raise ShapeRangeError(
                f"--shape-range {r}: {r.name!r} is not a dynamic dim of the model (its "
                f"dynamic dims: {have})"
            )
    buckets = ranges.buckets(counts)
    graphs = tuple(source.graph(b.values) for b in buckets)
    for bucket, graph in zip(buckets, graphs, strict=True):
        _check_same_ops(graphs[-1], buckets[-1], graph, bucket)
    return BucketGraphs(ranges, buckets, graphs, dim_axes(ranges, buckets, graphs))


def _check_same_ops(ref: Graph, ref_bucket: Bucket, graph: Graph, bucket: Bucket) -> None:
    """``graph`` has ``ref``'s ops, names and types, in its order."""
    mine = [(op.name, op.op_type) for op in graph.ops]
    theirs = [(op.name, op.op_type) for op in ref.ops]
    if mine == theirs:
        return
    diff = next(
        (i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
        min(len(mine), len(theirs)),
    )
    at = mine[diff][0] if diff < len(mine) else theirs[diff][0]
    raise ShapeRangeError(
        f"bucket {bucket.label} folds to a different graph than bucket {ref_bucket.label} "
        f"({len(mine)} ops against {len(theirs)}, first at {at!r}): its shapes change the "
        "model's structure; split the range there"
    )
