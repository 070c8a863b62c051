"""A plan over shape ranges read back at one shape: which bucket a concrete graph is in.

A range plan is tied to its model by what every bucket shares, not by one shape's
fingerprint: its ``structure`` (the ops by name and type, in order) and where each ranged dim
shows in the graph's inputs (``dim_axes``: an input, an axis, and what that axis adds to the
dim, as a static KV cache holds ``cache + 1`` rows). Both are found when the study starts,
from its bucket graphs; reading the plan at another shape takes the dims from the graph's
inputs and the bucket from them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from search_space.ir import Graph
from search_space.shapes.ranges import Bucket, ShapeRangeError, ShapeRanges

__all__ = ["DimAxis", "axes_from_json", "axes_json", "dim_axes", "dims_of", "structure_digest"]

DimAxis = tuple[str, str, int, int]  # (dim, graph input, axis, what the axis adds to the dim)


def structure_digest(graph: Graph) -> str:
    """The ops by name and type, in order: equal for every bucket of a range (shapes aside)."""
    h = hashlib.sha256()
    for op in graph.ops:
        h.update(f"{op.name}\x00{op.op_type}\x01".encode())
    return h.hexdigest()[:16]


def _activations(graph: Graph) -> list[str]:
    return [t for t in graph.inputs if graph.tensors[t].kind == "input"]


def dim_axes(
    ranges: ShapeRanges, buckets: Sequence[Bucket], graphs: Sequence[Graph]
) -> tuple[DimAxis, ...]:
    """Where each ranged dim shows in the inputs: the first input axis that is the dim plus a
    fixed offset in every bucket.

    Raises:
        ShapeRangeError: a ranged dim no input axis follows (the model's inputs do not say
            it, so no plan of it can tell its bucket).
    """
    found = []
    for r in ranges.ranges:
        hit = _first_axis(buckets, graphs, r.name)
        if hit is None:
            raise ShapeRangeError(
                f"no input of the model has an axis that follows {r.name!r} over its buckets; "
                "a plan could not tell a shape's bucket"
            )
        found.append((r.name, *hit))
    return tuple(found)


def _first_axis(
    buckets: Sequence[Bucket], graphs: Sequence[Graph], name: str
) -> tuple[str, int, int] | None:
    first, graph = buckets[0], graphs[0]
    pairs = list(zip(buckets, graphs, strict=True))
    for t in _activations(graph):
        for axis in range(len(graph.tensors[t].shape or ())):
            size = _size(graph, t, axis)
            if size is None:
                continue
            offset = size - first.values[name]
            if all(_size(g, t, axis) == b.values[name] + offset for b, g in pairs):
                return t, axis, offset
    return None


def _size(graph: Graph, tensor: str, axis: int) -> int | None:
    """The static size of ``tensor``'s ``axis`` (None: no such tensor or axis, or symbolic)."""
    ten = graph.tensors.get(tensor)
    shape = ten.shape if ten is not None else None
    size = shape[axis] if shape is not None and axis < len(shape) else None
    return size if isinstance(size, int) else None


def dims_of(graph: Graph, axes: Sequence[DimAxis]) -> dict[str, int]:
    """A concrete graph's value of each ranged dim (as its inputs show it).

    Raises:
        ShapeRangeError: an input the plan names is not in the graph, or has no such axis.
    """
    out: dict[str, int] = {}
    for dim, tensor, axis, offset in axes:
        size = _size(graph, tensor, axis) if tensor in graph.inputs else None
        if size is None:
            raise ShapeRangeError(
                f"the model has no input {tensor!r} with an axis {axis}, where the plan reads "
                f"{dim!r}; is it the model the plan was tuned for?"
            )
        out[dim] = size - offset
    return out


def axes_json(axes: Sequence[DimAxis]) -> dict[str, list[object]]:
    """``{"seq": ["input_ids", 1, 0]}``: how a plan file keeps them."""
    return {d: [t, a, o] for d, t, a, o in axes}


def axes_from_json(data: Mapping[str, Sequence[Any]]) -> tuple[DimAxis, ...]:
    """What :func:`axes_json` wrote.

    Raises:
        ValueError, TypeError: a malformed entry.
    """
    return tuple((str(d), str(v[0]), int(v[1]), int(v[2])) for d, v in data.items())
