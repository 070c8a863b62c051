"""Compile-time tensors the loader folded from static shapes but the folding evaluator cannot
compute (an op it does not know): onnxruntime on the slice of the model that computes them."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from search_space.ir import Graph

__all__ = ["slice_values"]


def slice_values(model: onnx.ModelProto, graph: Graph, names: list[str]) -> dict[str, np.ndarray]:
    """onnxruntime on the nodes that compute ``names`` from initializers and constants (graph
    inputs they read only for their shapes are fed zeros of their static shapes)."""
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
    inputs = [
        helper.make_tensor_value_info(t, _elem(graph, t), graph.tensors[t].static_shape)
        for t in fed
    ]
    outputs = [helper.make_tensor_value_info(t, _elem(graph, t), None) for t in names]
    sub = helper.make_graph(
        nodes, "constants", inputs, outputs, [inits[t] for t in sorted(reads & set(inits))]
    )
    m = helper.make_model(sub, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {t: np.zeros(graph.tensors[t].static_shape, _np(graph, t)) for t in fed}
    values = sess.run(None, feeds)
    return {t: np.ascontiguousarray(v) for t, v in zip(names, values, strict=True)}


def _np(graph: Graph, tensor: str) -> np.dtype:
    dtype = graph.tensors[tensor].dtype
    return np.dtype("float32" if dtype == "bfloat16" else dtype)


def _elem(graph: Graph, tensor: str) -> int:
    return int(helper.np_dtype_to_tensor_dtype(_np(graph, tensor)))
