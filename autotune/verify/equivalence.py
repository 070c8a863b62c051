"""Graph equivalence (docs/verification.md, level 1): the fused model computes what the original
does.

Both run in onnxruntime on fresh seeded inputs drawn from the ranges the graph implies (token
ids below their embedding table's size, masks 0/1, floats N(0, 1)); outputs are compared
with masked (-inf) entries left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from autotune.exceptions import AutotuneError
from search_space.ir import Graph
from search_space.onnx import node_names

__all__ = ["draw_inputs", "graph_equivalence"]

_PASS_THROUGH = frozenset(
    {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Expand", "Flatten"}
)


def _index_bound(graph: Graph, name: str) -> int:
    """Rows of the smallest table an integer input indexes (2 when it indexes none: a mask)."""
    bound, todo, seen = None, [name], {name}
    while todo:
        t = todo.pop()
        for op in graph.consumers(t):
            if op.op_type == "Gather" and len(op.inputs) > 1 and op.inputs[1] == t:
                table = graph.tensors[op.inputs[0]].static_shape
                rows = table[int(op.attr("axis", 0)) % len(table)]
                bound = rows if bound is None else min(bound, rows)
            elif op.op_type in _PASS_THROUGH:
                for o in op.outputs:
                    if o and o not in seen:
                        seen.add(o)
                        todo.append(o)
    return bound if bound is not None else 2


def draw_inputs(model: onnx.ModelProto, graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every fed graph input (weights given as inputs get N(0, 0.02))."""
    rng = np.random.default_rng(seed)
    meta = {p.key: p.value for p in model.metadata_props}
    ranges = json.loads(meta.get("ai.autofusion.input_ranges", "{}"))
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        ten = graph.tensors[vi.name]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = ten.static_shape
        if np.issubdtype(dtype, np.integer):
            lo, hi = ranges.get(vi.name, (0, _index_bound(graph, vi.name) - 1))
            feeds[vi.name] = rng.integers(lo, hi + 1, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            scale = 0.02 if ten.kind == "weight" else 1.0
            feeds[vi.name] = (rng.standard_normal(shape) * scale).astype(dtype)
    return feeds


def _run(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], which: str = "original"
) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    names_ok = node_names(model.graph.node)
    if any(n.name != m for n, m in zip(model.graph.node, names_ok, strict=True) if n.name):
        model = onnx.ModelProto.FromString(model.SerializeToString())  # repeated node names:
        for node, name in zip(model.graph.node, names_ok, strict=True):  # renamed apart, as
            node.name = name  # the tool names them (onnxruntime refuses repeats)
    try:
        sess = ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
    except Exception as err:  # onnxruntime's own errors: Fail, InvalidGraph, NotImplemented...
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise AutotuneError(
            f"onnxruntime cannot run the {which} model ({reason}); the graph check needs a "
            "model onnxruntime runs (custom ops registered, or the plan verified elsewhere)"
        ) from None
    names = [o.name for o in sess.get_outputs()]
    return [np.asarray(x) for x in sess.run(names, dict(feeds))]


def graph_equivalence(
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    graph: Graph,
    seed: int = 0,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Max abs / rel difference of every output between the original and the fused model."""
    del input_shapes
    feeds = draw_inputs(original, graph, seed)
    ref = _run(original, feeds)
    got = _run(fused, feeds, "fused")
    worst_abs = worst_rel = 0.0
    for a, b in zip(ref, got, strict=True):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        keep = np.isfinite(a64)
        if not np.array_equal(keep, np.isfinite(b64)):
            return {
                "ok": False,
                "graph_max_abs_err": float("inf"),
                "graph_max_rel_err": float("inf"),
                "reason": "non-finite entries differ",
            }
        diff = np.abs(a64[keep] - b64[keep])
        scale = np.abs(a64[keep]).max() if keep.any() else 1.0
        worst_abs = max(worst_abs, float(diff.max()) if diff.size else 0.0)
        worst_rel = max(worst_rel, float(diff.max() / (scale + 1e-12)) if diff.size else 0.0)
    return {
        "ok": worst_rel <= 1e-4,
        "graph_max_abs_err": worst_abs,
        "graph_max_rel_err": worst_rel,
    }
