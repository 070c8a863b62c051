"""One LLM decode step on the simulator: none, none with best tiles, greedy and tuned, beside
the floor (issue 25's report).

For ``llama3-8b-decode`` (32 layers at scale 1) at each ``--batch`` and ``--cache-len``, in
each ``--cache-form``: a fresh study of ``--trials`` trials (safe mode on, as `autotune tune`
runs), then on the simulator

* ``none``: every op its own kernel at its default tiles (an eager framework);
* ``none_best``: every op its own kernel at the study model's best tiles (the gain from
  tiling alone, without fusion);
* ``greedy``: the rule-based fusion (safe mode's greedy, what the plan is compared with);
* ``tuned``: the plan the study wrote;
* ``floor``: the weights and the past cache read once at the spec's effective HBM bandwidth
  (``hbm_bytes_per_s``), what no schedule of one step can beat.

Targets (batch 1): tuned >= 1.3x none_best (the gain from fusion itself), >= 1.15x greedy, and
within 1.3x of the floor.

    cd experiments && ../.venv/bin/python bench_decode.py    # -> results/bench_decode.csv
    cd experiments && ../.venv/bin/python bench_decode.py --layers 4 --trials 12   # minutes
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
from _study import fresh_study
from _table import RESULTS, emit

from costmodel.lower.common import mem_itemsize
from search_space import load_graph
from search_space.space import SpacePlan
from search_space.zoo import ZooOptions, resolve_model
from search_space.zoo.builder import WEIGHT_INPUTS_KEY, ZOO_KEY

MODEL = "llama3-8b-decode"


def _floor_us(graph: Any, weights: list[str], target: Any) -> tuple[float, float]:
    """(floor us, bytes): the weights and the past cache read once from HBM, each at its
    itemsize in device memory: weights converted offline to the cube's dtype (fp16 under
    ``auto``), the cache in the activations' dtype (the model's own under ``auto``)."""
    names = set(weights) | {t for t in graph.inputs if t.startswith("past_key_values.")}
    total = 0
    for t in names:
        readers = graph.consumers(t)
        elem = mem_itemsize(graph, t, target, cube_operand=t in weights)
        if readers and all(o.op_type == "Gather" and o.inputs[0] == t for o in readers):
            # an embedding table: a step reads the rows of its tokens, not the table
            n = sum(int(np.prod(graph.tensors[o.outputs[0]].shape)) for o in readers)
        else:
            n = int(np.prod(graph.tensors[t].shape))
        total += n * elem
    return total / target.spec.hbm_bytes_per_s * 1e6, float(total)


def bench(batch: int, cache_len: int, form: str, layers: int | None, trials: int) -> dict:
    zoo = ZooOptions(layers=layers, batch=batch, cache_len=cache_len, cache_form=form)
    spec = f"zoo:{MODEL}"
    model = resolve_model(spec, zoo)
    graph = load_graph(model)
    meta = {p.key: p.value for p in model.metadata_props}  # type: ignore[union-attr]
    weights = json.loads(meta.get(WEIGHT_INPUTS_KEY, "[]"))
    with fresh_study(graph, spec, zoo, MODEL, trials) as study:
        result, s, target, wall = study.result, study.session, study.target, study.wall_s
        none = s.baselines["none"]
        none_best = SpacePlan(none.groups, tuple(s.oracle.best(g)[0] for g in none.groups))
        none_us = s.measure(none, "none").latency_us
        none_best_us = s.measure(none_best, "none, best tiles").latency_us
    floor, nbytes = _floor_us(graph, weights, target)
    tuned, greedy = result.best_latency_us, result.baseline_us["greedy"]
    return {
        "batch": batch,
        "cache_len": cache_len,
        "form": form,
        "layers": graph_layers(model),
        "kernels_tuned": len(result.plan.groups),
        "none_us": round(none_us, 1),
        "none_best_us": round(none_best_us, 1),
        "greedy_us": round(greedy, 1),
        "tuned_us": round(tuned, 1),
        "floor_us": round(floor, 1),
        "floor_mb": round(nbytes / 1e6, 1),
        "vs_none_best": round(none_best_us / tuned, 3),
        "vs_greedy": round(greedy / tuned, 3),
        "over_floor": round(tuned / floor, 3),
        "wall_s": round(wall, 1),
    }


def graph_layers(model: Any) -> int:
    meta = {p.key: p.value for p in model.metadata_props}
    extra = json.loads(meta.get(ZOO_KEY, "{}"))
    return int(extra.get("layers", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--cache-len", type=int, default=2048)
    parser.add_argument("--forms", nargs="*", default=["static", "concat"])
    parser.add_argument("--layers", type=int, default=None, help="default: 32 (scale 1)")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--csv", default=str(RESULTS / "bench_decode.csv"))
    args = parser.parse_args()
    rows = []
    for batch in args.batch:
        for form in args.forms:
            rows.append(bench(batch, args.cache_len, form, args.layers, args.trials))
            print(rows[-1], flush=True)
            emit(rows, args.csv)


if __name__ == "__main__":
    main()
