"""How well the closed form ranks a fused prologue kernel's configs against the simulator.

Add -> MatMul(1024 x 1024 x 1024, fp16) [-> Tanh]: the vector side computes the cube's operand
each step. For every chip and both forms, about 40 configs of the group's grid are simulated
and predicted by the raw analytic model; the table gives Kendall's tau of the two orders and
the spread of their ratio (max / min of predicted / simulated). CI checks one case
(``tests/costmodel/test_simulator_prologue.py``); this script runs them all (about 3 minutes).

    cd experiments && ../.venv/bin/python prologue_ranking.py

Writes experiments/results/prologue_ranking.csv.
"""

from __future__ import annotations

import json
import time

import numpy as np
from _table import RESULTS, emit
from onnx import TensorProto, helper
from scipy.stats import kendalltau

from costmodel.analytic import AnalyticModel
from costmodel.lower import Lowering
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import make_group

# the floors CI holds the 910B to, and the 910's as found when the terms were added
FLOORS = {"ascend910b": (0.93, 1.7), "ascend910": (0.85, 2.2)}


def prologue_graph(m: int, k: int, n: int, epilogue: bool):
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Add", ["x", "y"], ["s"], name="add"),
        helper.make_node("MatMul", ["s", "w"], ["c0" if epilogue else "c"], name="mm"),
    ]
    if epilogue:
        nodes.append(helper.make_node("Tanh", ["c0"], ["c"], name="act"))
    f16 = TensorProto.FLOAT16
    ins = [vi("x", f16, [m, k]), vi("y", f16, [m, k]), vi("w", f16, [k, n])]
    graph = helper.make_graph(nodes, "g", ins, [vi("c", f16, [m, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    entry = model.metadata_props.add()  # w is a weight (the zoo's weights=inputs mode)
    entry.key, entry.value = "ai.autofusion.weight_inputs", json.dumps(["w"])
    return load_graph(model), [node.name for node in nodes]


def main() -> None:
    rows = []
    for target_name, (tau_floor, spread_ceiling) in FLOORS.items():
        for epilogue in (False, True):
            t0 = time.perf_counter()
            graph, ops = prologue_graph(1024, 1024, 1024, epilogue)
            target = load_target(target_name)
            lowering = Lowering(graph, target)
            group = make_group(graph, ops)
            grid = lowering.grid(group)
            configs = grid[:: max(1, len(grid) // 40)]
            sim = SimulatorModel(target)
            truth = np.array(
                [sim.evaluate([lowering.kernel(group, c)])[0].latency_us for c in configs]
            )
            guess = AnalyticModel(target, "raw").predict_batch(lowering.batch(group, configs))
            ratio = guess / truth
            rows.append({"chip": target_name, "epilogue": epilogue, "configs": len(configs),
                         "tau": round(float(kendalltau(guess, truth).statistic), 3),
                         "tau_floor": tau_floor,
                         "spread": round(float(ratio.max() / ratio.min()), 2),
                         "spread_ceiling": spread_ceiling,
                         "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip
    emit(rows, RESULTS / "prologue_ranking.csv")


if __name__ == "__main__":
    main()
