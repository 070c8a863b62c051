"""Real torch.onnx exports (legacy and dynamo) come out fully static and truthful.

The fixtures are tiny models written by the exporters themselves
(experiments/export_torch_models.py). onnxruntime is the oracle: every tensor's static shape
and every folded value must equal what the runtime computes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from conftest import EXPORT_FILES, EXPORTS, export_shapes
from oracles import random_feeds, run_all

from search_space import GraphError, load_graph
from search_space.ir import CUBE_OPS


def _cases():
    for name in EXPORT_FILES:
        sizes = [(2, 16), (1, 5)]
        if name == "encoder_layer_legacy_op14.onnx":  # the legacy exporter baked seq = 8 in
            sizes = [(2, 8), (3, 8)]
        for batch, seq in sizes:
            yield pytest.param(name, batch, seq, id=f"{name[:-5]}-{batch}x{seq}")


def test_every_fixture_is_covered() -> None:
    assert len(EXPORT_FILES) >= 14


@pytest.mark.parametrize(("name", "batch", "seq"), list(_cases()))
def test_export_is_static_and_matches_onnxruntime(name: str, batch: int, seq: int) -> None:
    path = EXPORTS / name
    model = onnx.load(str(path))
    shapes = export_shapes(name, batch, seq)
    graph = load_graph(path, input_shapes=shapes)
    assert graph.dynamic_tensors == ()
    names = [t for t, ten in graph.tensors.items() if ten.kind == "intermediate"]
    names += [t for t in graph.constants if t not in {i.name for i in model.graph.initializer}]
    got = run_all(model, random_feeds(model, shapes, high=2), names)
    for t in names:
        if t in graph.constants:
            np.testing.assert_array_equal(graph.constants[t], got[t], err_msg=t)
        else:
            assert graph.tensors[t].static_shape == got[t].shape, t
    # the user's compute ops survive folding, under their own names
    original = Counter(n.op_type for n in model.graph.node)
    kept = Counter(op.op_type for op in graph.ops)
    for op_type in CUBE_OPS | {"BatchNormalization", "LayerNormalization", "Softmax", "Erf"}:
        assert kept[op_type] == original[op_type], op_type
    assert {op.name for op in graph.ops} <= {n.name for n in model.graph.node}


@pytest.mark.parametrize(
    "name",
    [
        "bert_legacy_op14.onnx",
        "bert_legacy_op11.onnx",
        "bert_dynamo.onnx",
        "bert_legacy_extdata.onnx",
    ],
)
def test_bert_matmul_flops_equal_a_hand_count(name: str) -> None:
    # hidden H=32, 2 layers, 2 heads of d=16, FFN I=64; batch 2 x seq 16 = T 32 tokens:
    # per layer 8*T*H^2 (Q,K,V,O) + 4*B*S^2*H (QK^T, PV) + 4*T*H*I (FFN) = 589,824 FLOPs.
    graph = load_graph(EXPORTS / name, input_shapes=export_shapes(name, 2, 16))
    assert graph.cube_flops == 2 * 589_824


def test_baked_sequence_length_is_reported_not_guessed() -> None:
    with pytest.raises(GraphError, match=r"Reshape.*contradict"):
        load_graph(EXPORTS / "encoder_layer_legacy_op14.onnx", input_shapes={"x": (2, 16, 32)})
