"""A fused prologue kernel (Add -> MatMul [-> Tanh]) and how well the closed form ranks its
configs against the simulator; shared by tests/costmodel/test_simulator_prologue.py and
experiments/prologue_ranking.py (which puts this folder on its path)."""

from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper
from scipy.stats import kendalltau

from costmodel.analytic import AnalyticModel
from costmodel.lower import Lowering
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target
from search_space import Graph, load_graph
from search_space.ir import make_group
from search_space.onnx.loader import WEIGHT_INPUTS_KEY

__all__ = ["prologue_graph", "prologue_ranking"]


def prologue_graph(m: int, k: int, n: int, epilogue: bool) -> tuple[Graph, list[str]]:
    """x + y -> MatMul(., w) [-> Tanh] in fp16, w a weight: the vector side computes the
    cube's operand each step. Returns the graph and its ops' names."""
    vi, f16 = helper.make_tensor_value_info, TensorProto.FLOAT16
    nodes = [
        helper.make_node("Add", ["x", "y"], ["s"], name="add"),
        helper.make_node("MatMul", ["s", "w"], ["c0" if epilogue else "c"], name="mm"),
    ]
    if epilogue:
        nodes.append(helper.make_node("Tanh", ["c0"], ["c"], name="act"))
    ins = [vi("x", f16, [m, k]), vi("y", f16, [m, k]), vi("w", f16, [k, n])]
    graph = helper.make_graph(nodes, "g", ins, [vi("c", f16, [m, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    entry = model.metadata_props.add()
    entry.key, entry.value = WEIGHT_INPUTS_KEY, json.dumps(["w"])
    return load_graph(model), [node.name for node in nodes]


def prologue_ranking(
    target_name: str, epilogue: bool, samples: int = 40, m: int = 1024
) -> tuple[float, float, int]:
    """Kendall's tau of the raw analytic model's order of about ``samples`` configs of the
    ``m`` x 1024 x 1024 prologue group's grid against the simulator's, the spread (max / min)
    of their ratio, and the number of configs."""
    graph, ops = prologue_graph(m, 1024, 1024, epilogue)
    target = load_target(target_name)
    lowering = Lowering(graph, target)
    group = make_group(graph, ops)
    grid = lowering.grid(group)
    configs = grid[:: max(1, len(grid) // samples)]
    sim = SimulatorModel(target)
    truth = np.array([sim.evaluate([lowering.kernel(group, c)])[0].latency_us for c in configs])
    guess = AnalyticModel(target, "raw").predict_batch(lowering.batch(group, configs))
    ratio = guess / truth
    return (
        float(kendalltau(guess, truth).statistic),
        float(ratio.max() / ratio.min()),
        len(configs),
    )
