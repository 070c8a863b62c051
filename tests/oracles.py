"""Independent oracles for tests: what onnxruntime says a model computes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper


def run_all(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], names: Iterable[str]
) -> dict[str, np.ndarray]:
    """Run ``model`` in onnxruntime and return the values of ``names`` (intermediates too)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(helper.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in sess.get_outputs()]
    return dict(zip(wanted, sess.run(wanted, dict(feeds)), strict=True))


def random_feeds(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], seed: int = 0, high: int = 2
) -> dict[str, np.ndarray]:
    """Seeded inputs: integers in [0, high) (ids, 0/1 masks), floats N(0, 1)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = shapes.get(vi.name) or tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        if np.issubdtype(dtype, np.integer):
            feeds[vi.name] = rng.integers(0, high, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
