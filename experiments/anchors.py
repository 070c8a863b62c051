"""Published 910B anchors, end to end from an ONNX model with each kernel at its default config:
the simulator, the analytic model with the spec's constants, and with the shipped fitted ones.

    cd experiments && ../.venv/bin/python anchors.py

Prints a table and writes experiments/results/anchors.csv. The bands are what
tests/costmodel/test_anchors.py asserts (public torch_npu and msprof figures of a 910B2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx
from _table import emit  # experiments/_table.py (scripts run from this folder)
from onnx import TensorProto, helper

from autotune.estimate import plan_kernels
from costmodel.analytic import AnalyticModel
from costmodel.base import CostModel
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target
from search_space import WEIGHT_INPUTS_KEY, load_graph
from search_space.ir import Graph

vi = helper.make_tensor_value_info


def _model(nodes: list[onnx.NodeProto], inputs: list[str], n: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [vi(x, TensorProto.FLOAT16, n) for x in inputs],
        [vi(nodes[-1].output[0], TensorProto.FLOAT16, [n[0], n[-1]] if len(n) == 2 else n)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def matmul(n: int) -> Graph:
    model = _model([helper.make_node("MatMul", ["a", "w"], ["c"], name="mm")], ["a", "w"], [n, n])
    helper.set_model_props(model, {WEIGHT_INPUTS_KEY: '["w"]'})
    return load_graph(model)


def matmul_activation(n: int) -> Graph:
    return load_graph(
        _model([helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")], ["a", "b"], [n, n])
    )


def add(n: int) -> Graph:
    return load_graph(
        _model([helper.make_node("Add", ["x", "y"], ["z"], name="add")], ["x", "y"], [n])
    )


def _us(graph: Graph, kind: str, sets: tuple[str, ...] = ()) -> float:
    target = load_target("ascend910b", sets)
    _, kernels = plan_kernels(graph, "none", target)
    models: dict[str, CostModel] = {
        "simulator": SimulatorModel(target),
        "analytic, spec": AnalyticModel(target, "raw"),
        "analytic, fitted": AnalyticModel(target),
    }
    return float(sum(c.latency_us for c in models[kind].evaluate(kernels)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default=str(Path(__file__).parent / "results" / "anchors.csv"))
    args = parser.parse_args()
    peak = load_target().spec.cube_peak_flops
    big, n_add = 8192, 64 * 2**20
    flops = 2 * big**3
    moved = 3 * n_add * 2
    anchors = [
        ("fp16 MatMul 8192^3 (B a weight), % of cube peak", "85-95%", matmul(big), (),
         lambda us: f"{flops / (us * 1e-6) / peak:.1%}"),
        ("same with --set l2_bytes=0", "< 65%", matmul(big), ("l2_bytes=0",),
         lambda us: f"{flops / (us * 1e-6) / peak:.1%}"),
        ("same with B an activation (ND->NZ on the fly)", "", matmul_activation(big), (),
         lambda us: f"{flops / (us * 1e-6) / peak:.1%}"),
        ("fp16 Add of 64 Mi elements, TB/s", "1.1-1.5", add(n_add), (),
         lambda us: f"{moved / (us * 1e-6) / 1e12:.3f}"),
        ("same with half the HBM bandwidth, TB/s", "half", add(n_add),
         ("hbm_bytes_per_s=6.5e11",), lambda us: f"{moved / (us * 1e-6) / 1e12:.3f}"),
        ("kernel on 1 KB, us", "4-10", add(256), (), lambda us: f"{us:.2f}"),
    ]  # fmt: skip
    rows = []
    for name, band, graph, sets, show in anchors:
        row = {"anchor": name, "band": band}
        for kind in ("simulator", "analytic, spec", "analytic, fitted"):
            row[kind] = show(_us(graph, kind, sets))
        rows.append(row)
        print(row, flush=True)
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
