"""Graph records: fingerprint is structural, the networkx view is the op DAG, totals add up."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import onnx
from conftest import conv_bn_relu, exporter_attention

from search_space import load_graph


def _renamed(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    rename = {}
    for i, node in enumerate(m.graph.node):
        node.name = f"n{i}"
        for k, out in enumerate(node.output):
            rename[out] = f"t{i}_{k}"
            node.output[k] = rename[out]
    for node in m.graph.node:
        for k, name in enumerate(node.input):
            node.input[k] = rename.get(name, name)
    for out in m.graph.output:
        out.name = rename.get(out.name, out.name)
    return m


def test_fingerprint_ignores_names_and_weights_but_not_shapes() -> None:
    model = conv_bn_relu()
    shapes = {"img": (2, 3, 16, 16)}
    base = load_graph(model, input_shapes=shapes).fingerprint()
    assert load_graph(_renamed(model), input_shapes=shapes).fingerprint() == base
    noisy = onnx.ModelProto()
    noisy.CopyFrom(model)
    w = noisy.graph.initializer[0]
    w.raw_data = (onnx.numpy_helper.to_array(w) + 1).astype(np.float32).tobytes()
    assert load_graph(noisy, input_shapes=shapes).fingerprint() == base
    assert load_graph(model, input_shapes={"img": (4, 3, 16, 16)}).fingerprint() != base
    strided = onnx.ModelProto()
    strided.CopyFrom(model)
    strided.graph.node[0].attribute[1].ints[:] = [1, 1]  # strides
    assert load_graph(strided, input_shapes=shapes).fingerprint() != base


def test_networkx_view_is_the_op_dag() -> None:
    graph = load_graph(exporter_attention(), input_shapes={"x": (2, 5, 16)})
    g = graph.nx
    assert nx.is_directed_acyclic_graph(g) and g.number_of_nodes() == len(graph.ops)
    order = {op.name: i for i, op in enumerate(graph.ops)}
    assert all(order[a] < order[b] for a, b in g.edges)  # ops are in topological order
    for op in graph.ops:
        for t in op.inputs:
            src = graph.producer(t) if t else None
            if src is not None:
                assert t in g.edges[src.name, op.name]["tensors"]
                assert op in graph.consumers(t)


def test_totals_are_sums_and_bytes_min_counts_inputs_weights_outputs() -> None:
    graph = load_graph(conv_bn_relu(), input_shapes={"img": (2, 3, 16, 16)})
    assert graph.flops == sum(op.flops for op in graph.ops) > 0
    weights = sum(t.nbytes for t in graph.tensors.values() if t.kind == "weight")
    assert graph.bytes_min == 4 * math.prod((2, 3, 16, 16)) + weights + 4 * 2 * 10
    assert graph.bytes_min <= sum(op.bytes for op in graph.ops)


def test_embedding_gather_counts_rows_not_the_table() -> None:
    from conftest import f32, make
    from onnx import TensorProto as T
    from onnx import helper

    vocab, dim = 1000, 8
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="embed", axis=0)]
    ids = helper.make_tensor_value_info("ids", T.INT64, [2, 3])
    emb = helper.make_tensor_value_info("emb", T.FLOAT, [2, 3, dim])
    table = f32("table", np.zeros((vocab, dim)))
    graph = load_graph(make(nodes, [ids], [emb], [table]))
    rows = 2 * 3 * dim * 4
    assert graph.op("embed").bytes == 2 * 3 * 8 + 2 * rows  # ids, rows read, rows written
    assert graph.bytes_min == 2 * 3 * 8 + rows + rows  # ids in, rows of the table, output


def test_fingerprint_does_not_depend_on_how_weights_are_stored() -> None:
    from search_space.zoo import build

    a = load_graph(build("gpt2", weights="inputs", scale=0.1)).fingerprint()
    b = load_graph(build("gpt2", weights="random", scale=0.1)).fingerprint()
    assert a == b
