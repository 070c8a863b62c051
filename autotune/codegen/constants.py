"""Values of the compile-time tensors a generated package holds: weights, folded constants,
and outputs of constant-only ops (evaluated here by the loader's folding, or by onnxruntime on
the slice of the model that computes them when folding does not know the op)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from autotune.verify.sources import ModelSource, np_dtype
from search_space.ir import Graph

__all__ = ["constant_values"]


def constant_values(
    model: onnx.ModelProto, graph: Graph, names: Sequence[str]
) -> dict[str, np.ndarray]:
    """``names`` -> their values (contiguous arrays)."""
    source = ModelSource(model, graph)
    out: dict[str, np.ndarray] = {}
    missing = []
    for t in names:
        try:
            out[t] = np.ascontiguousarray(source.value(t))
        except ValueError:
            missing.append(t)
    if missing:
        out.update(_evaluate(model, graph, missing))
    return out


def _evaluate(model: onnx.ModelProto, graph: Graph, names: list[str]) -> dict[str, np.ndarray]:
    """onnxruntime on the nodes that compute ``names`` from initializers and constants."""
    producer = {t: n for n in model.graph.node for t in n.output if t}
    inits = {t.name: t for t in model.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    needed: set[str] = set()
    todo = list(names)
    while todo:
        t = todo.pop()
        if t in needed or t in inits or t not in producer:
            continue
        needed.add(t)
        node = producer[t]
        if node not in nodes:
            nodes.append(node)
            todo.extend(i for i in node.input if i)
    order = {id(n): i for i, n in enumerate(model.graph.node)}
    nodes.sort(key=lambda n: order[id(n)])
    reads = {i for n in nodes for i in n.input}
    produced = {o for n in nodes for o in n.output}
    # graph inputs read only for their shapes (the loader folded Shape ops with static dims)
    fed = sorted(t for t in reads - produced - set(inits) if t in graph.tensors)
    inputs = [helper.make_tensor_value_info(t, _elem(graph, t), graph.tensors[t].static_shape)
              for t in fed]  # fmt: skip
    outputs = [helper.make_tensor_value_info(t, _elem(graph, t), None) for t in names]
    sub = helper.make_graph(nodes, "constants", inputs, outputs,
                            [inits[t] for t in sorted(reads & set(inits))])  # fmt: skip
    m = helper.make_model(sub, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        t: np.zeros(graph.tensors[t].static_shape, np_dtype(graph.tensors[t].dtype)) for t in fed
    }
    values = sess.run(None, feeds)
    return {t: np.ascontiguousarray(v) for t, v in zip(names, values, strict=True)}


def _elem(graph: Graph, tensor: str) -> int:
    return int(helper.np_dtype_to_tensor_dtype(np_dtype(graph.tensors[tensor].dtype)))
