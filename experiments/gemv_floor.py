"""How far each decode-step matmul on the cube is from its weight-read floor: the room a
vector-unit GEMV could have (issue 25).

A decode step's projections are GEMVs (M = batch): they read their weight once and do little
arithmetic, so any unit is bound by the weight bytes over the effective HBM bandwidth. Each
``MatMul``/``Gemm`` of one layer (and the LM head) of ``llama3-8b-decode`` and
``gpt2-decode`` is lowered alone for the cube and simulated at its default tiles and at the
simulator's own best of the analytic model's six best configs, beside

* ``floor``: the weight's bytes at the spec's effective HBM bandwidth (``hbm_bytes_per_s``),
  which a kernel on any unit, with any number of cores, cannot beat;
* ``fixed_us``: the kernel's head, the tiling read and scalar set-up, and the first load's
  latency: what every kernel pays, on either unit, before its weight streams.

* ``vector_mac_us``: the vector unit's arithmetic alone, every core doing one fused
  multiply-add per lane per cycle (``vector_bytes_per_cycle`` of the weight's dtype).

A vector-unit GEMV pays the fixed costs and then the larger of the floor and its arithmetic,
so on one kernel it could gain at most ``room_us = best - fixed - max(floor, vector_mac)``
over the cube at its best tiles (``room_share`` of the cube's time; negative: it loses).

    cd experiments && ../.venv/bin/python gemv_floor.py    # -> results/gemv_floor.csv
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from _table import RESULTS, emit

from costmodel import load_target, make_cost_model
from costmodel.lower import Lowering
from costmodel.lower.common import mem_itemsize
from search_space.ir import is_compile_time, make_group
from search_space.zoo import ZooOptions
from search_space.zoo.resolve import load_model_spec

MODELS = {"llama3-8b-decode": 2048, "gpt2-decode": 1023}  # model -> cache length
RANKED = 6  # configs simulated per matmul: the analytic model's best few


def _rows(model: str, cache_len: int, batch: int, target_name: str) -> list[dict[str, Any]]:
    target = load_target(target_name)
    spec = target.spec
    sim = make_cost_model("simulator", target)
    ana = make_cost_model("analytic", target)
    graph = load_model_spec(
        f"zoo:{model}", zoo=ZooOptions(layers=1, batch=batch, cache_len=cache_len)
    )
    lowering = Lowering(graph, target)
    # every kernel's head, tiling read and set-up, then its first load's latency
    fixed = (spec.kernel_fixed_cycles + spec.gm_latency_cycles) / spec.clock_hz * 1e6
    rows = []
    for op in graph.ops:
        if op.op_type not in ("MatMul", "Gemm") or not is_compile_time(graph, op.inputs[1]):
            continue  # attention's matmuls read the cache, not a weight: flash-decoding's
        group = make_group(graph, [op.name])
        grid = lowering.grid(group)
        scores = ana.predict_batch(lowering.batch(group, grid))  # type: ignore[attr-defined]
        ranked = [lowering.kernel(group, grid[i]) for i in np.argsort(scores)[:RANKED]]
        best = min(sim.evaluate([k])[0].device_us for k in ranked)
        default = sim.evaluate([lowering.kernel(group, lowering.default(group))])[0].device_us
        weight = graph.tensors[op.inputs[1]]
        item = mem_itemsize(graph, op.inputs[1], target, cube_operand=True)
        floor = weight.numel * item / spec.hbm_bytes_per_s * 1e6
        out = graph.tensors[op.outputs[0]]
        m = out.numel // out.static_shape[-1]  # rows of A: the batch's tokens
        lanes = spec.vector_bytes_per_cycle // item * spec.vector_cores
        mac = m * weight.numel / lanes / spec.clock_hz * 1e6
        room = best - fixed - max(floor, mac)
        rows.append(
            {
                "model": model,
                "batch": batch,
                "matmul": op.name.rsplit("/", 2)[-2] if "/" in op.name else op.name,
                "weight": "x".join(map(str, weight.static_shape)),
                "floor_us": round(floor, 2),
                "fixed_us": round(fixed, 2),
                "cube_default_us": round(default, 2),
                "cube_best_us": round(best, 2),
                "over_floor": round(best / floor, 3),
                "vector_mac_us": round(mac, 2),
                "room_us": round(room, 2),
                "room_share": round(room / best, 3),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--target", default="ascend910b")
    parser.add_argument("--out", default=str(RESULTS / "gemv_floor.csv"))
    args = parser.parse_args()
    rows = [
        row
        for model, cache in MODELS.items()
        for batch in args.batch
        for row in _rows(model, cache, batch, args.target)
    ]
    emit(rows, args.out, width=10)


if __name__ == "__main__":
    main()
