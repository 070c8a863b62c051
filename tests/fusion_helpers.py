"""Random DAGs (a hypothesis strategy, as exporters write their ops) and the check that a
partition is legal: shared by the tests of search_space and of costmodel."""

from __future__ import annotations

import json

import networkx as nx
from conftest import make
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper

from search_space.fusion import FusionContext

D = 64
KINDS = [
    "MatMul",
    "Add",
    "Relu",
    "Softmax",
    "LayerNormalization",
    "Mul",
    "Opaque",
    "Reshape",
    "Sigmoid",
    "ReduceMean",
]


@st.composite
def random_dags(draw):
    n = draw(st.integers(3, 12))
    tensors = ["x"]
    nodes, weights, value_info = [], [], []
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        a = draw(st.sampled_from(tensors))
        out = f"t{i}"
        name = f"op{i}"
        if kind == "MatMul":
            w = f"w{i}"
            weights.append(helper.make_tensor_value_info(w, T.FLOAT, [D, D]))
            nodes.append(helper.make_node("MatMul", [a, w], [out], name=name))
        elif kind in ("Add", "Mul"):
            b = draw(st.sampled_from(tensors))
            nodes.append(helper.make_node(kind, [a, b], [out], name=name))
        elif kind == "LayerNormalization":
            g = f"g{i}"
            weights.append(helper.make_tensor_value_info(g, T.FLOAT, [D]))
            nodes.append(helper.make_node(kind, [a, g], [out], name=name, axis=-1))
        elif kind == "Softmax":
            nodes.append(helper.make_node(kind, [a], [out], name=name, axis=-1))
        elif kind == "ReduceMean":
            nodes.append(helper.make_node(kind, [a], [f"r{i}"], name=name, axes=[-1], keepdims=1))
            nodes.append(helper.make_node("Add", [a, f"r{i}"], [out], name=f"{name}_b"))
        elif kind == "Reshape":
            nodes.append(helper.make_node(kind, [a, "shape"], [out], name=name))
        elif kind == "Opaque":
            nodes.append(helper.make_node("Mystery", [a], [out], name=name, domain="x.y"))
            value_info.append(helper.make_tensor_value_info(out, T.FLOAT, [32, D]))
        else:
            nodes.append(helper.make_node(kind, [a], [out], name=name))
        tensors.append(out)
    used = {t for node in nodes for t in node.input}
    outs = [
        helper.make_tensor_value_info(t, T.FLOAT, [32, D]) for t in tensors[1:] if t not in used
    ] or [helper.make_tensor_value_info(tensors[-1], T.FLOAT, [32, D])]
    inits = [
        helper.make_tensor("axes", T.INT64, [1], [-1]),
        helper.make_tensor("shape", T.INT64, [2], [32, D]),
    ]
    model = make(
        nodes, [helper.make_tensor_value_info("x", T.FLOAT, [32, D]), *weights], outs, inits
    )
    model.opset_import.append(helper.make_opsetid("x.y", 1))
    model.graph.value_info.extend(value_info)
    entry = model.metadata_props.add()
    entry.key, entry.value = "ai.autofusion.weight_inputs", json.dumps([w.name for w in weights])
    subset = draw(st.lists(st.booleans(), min_size=64, max_size=64))
    return model, subset


def assert_legal_partition(ctx: FusionContext, partition, forbidden=()) -> None:
    flat = [n for p in partition for n in p]
    assert sorted(flat) == sorted(ctx.nodes)  # a partition: every kernel op exactly once
    where = {n: i for i, p in enumerate(partition) for n in p}
    for p in partition:
        assert ctx.check(p).ok, (sorted(p), ctx.check(p).reason)
        assert ctx.is_convex(p)
        if len(p) > 1:
            assert not any(ctx.graph.op(n).op_type in forbidden for n in p)
    contracted = nx.DiGraph()
    contracted.add_nodes_from(range(len(partition)))
    for n in ctx.nodes:
        for m in ctx.succ[n]:
            if where[n] != where[m]:
                contracted.add_edge(where[n], where[m])
    assert nx.is_directed_acyclic_graph(contracted)
