"""The graph roofline: nothing may beat it, and it counts every weight however it is stored."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from plan_helpers import plan_kernels

from costmodel.registry import make_cost_model
from costmodel.roofline import compulsory_bytes, roofline_us
from costmodel.spec import load_target
from search_space import load_graph
from search_space.zoo import build


def _conv(weights_in_graph: bool):
    """A 3x3 convolution whose weight is an initializer, or built by ConstantOfShape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 56, 56])
    shape = [128, 64, 3, 3]
    nodes, inits = [], []
    if weights_in_graph:
        inits.append(numpy_helper.from_array(np.array(shape, np.int64), "w_shape"))
        value = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.02])
        nodes.append(helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=value))
    else:
        inits.append(numpy_helper.from_array(np.full(shape, 0.02, np.float32), "w"))
    nodes.append(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]))
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_weight_built_in_the_graph_counts_as_a_weight() -> None:
    target = load_target()
    stored, built = load_graph(_conv(False)), load_graph(_conv(True))
    weight = 128 * 64 * 9 * 2  # at the cube's fp16
    assert compulsory_bytes(built, target) == compulsory_bytes(stored, target)
    assert compulsory_bytes(stored, target) >= weight
    assert roofline_us(built, target) == roofline_us(stored, target)


@pytest.mark.parametrize("name", ["resnet50", "bert-base", "mobilenetv3"])
def test_no_plan_beats_the_roofline_on_the_simulator(name: str) -> None:
    graph = load_graph(build(name, weights="inputs", scale=0.1))
    target = load_target()
    sim = make_cost_model("simulator", target)
    bound = roofline_us(graph, target)
    for plan in ("none", "greedy", "max"):
        _, kernels = plan_kernels(graph, plan, target)
        assert bound <= float(sim.predict(kernels).sum()), plan
