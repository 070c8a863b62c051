"""Which fusions the cost model's choices gained or lost between two versions of the code.

For every zoo model, the exact minimum-cost plan under the additive analytic model (``estimate
--plan optimal --cost analytic``: the plan a tuner converges to under that model, without a
sampler's noise) is reduced to its kernels' op-type chains (``MatMul+Add+Gelu``). Run it once
per version, the older one from a worktree, then compare:

    git worktree add /tmp/old <commit> && cd experiments
    PYTHONPATH=/tmp/old ../.venv/bin/python fusion_shift.py --run results/fusion_old.json
    ../.venv/bin/python fusion_shift.py --run results/fusion_new.json
    ../.venv/bin/python fusion_shift.py --compare results/fusion_old.json \
        results/fusion_new.json                    # -> results/fusion_shift.csv (--out)
    ../.venv/bin/python fusion_shift.py --margin results/fusion_old.json \
        results/fusion_new.json                    # -> results/fusion_margin.csv (--out)

``--margin`` costs both versions' plans (their kernels' ops, each at its best config) under
the analytic model of the code it runs: what the other version's plan loses by this one's.

``--run`` asks the ``autotune`` command of whatever code ``PYTHONPATH`` names (it uses the CLI
only, which both versions share); the op types come from the same code's zoo build.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from _table import RESULTS, emit

MODELS: dict[str, int | None] = {  # zoo model -> layers (llama3-8b: two, the rest repeats)
    "bert-base": None,
    "gpt2": None,
    "llama3-8b": 2,
    "mobilenetv3": None,
    "resnet50": None,
    "transformer-base": None,
    "vit-b16": None,
}
CLI = "from autotune.cli import app; app()"


def _op_types(name: str, layers: int | None) -> dict[str, str]:
    from search_space import load_graph
    from search_space.zoo import build

    graph = load_graph(build(name, weights="inputs", layers=layers))
    return {op.name: op.op_type for op in graph.ops}


def run(out: Path) -> None:
    plans: dict[str, Any] = {}
    for name, layers in MODELS.items():
        extra = ["--layers", str(layers)] if layers else []
        cmd = [sys.executable, "-c", CLI, "estimate", f"zoo:{name}", *extra]
        cmd += ["--plan", "optimal", "--cost", "analytic", "--json"]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        report = json.loads(res.stdout.strip().splitlines()[-1])
        types = _op_types(name, layers)
        chains = ["+".join(types.get(n, "?") for n in k["ops"]) for k in report["kernels"]]
        groups = [[k["ops"], k["kind"]] for k in report["kernels"]]
        us = report["latency"]["us"]
        plans[name] = {"latency_us": us, "chains": chains, "groups": groups}
        print(f"{name}: {len(chains)} kernels, {us:.1f} us", flush=True)
    out.write_text(json.dumps(plans, indent=1))


def compare(old: Path, new: Path, out: Path) -> None:
    before, after = json.loads(old.read_text()), json.loads(new.read_text())
    rows = []
    for name in MODELS:
        a, b = Counter(before[name]["chains"]), Counter(after[name]["chains"])
        for chain in sorted(set(a) | set(b)):
            if a[chain] != b[chain] and "+" in chain:  # fused kernels whose count moved
                rows.append(
                    {
                        "model": name,
                        "fused kernel": chain,
                        "before": a[chain],
                        "after": b[chain],
                    }
                )
        rows.append(
            {
                "model": name,
                "fused kernel": "(kernels in all)",
                "before": len(before[name]["chains"]),
                "after": len(after[name]["chains"]),
            }
        )
    emit(rows, out)


def margin(old: Path, new: Path, out: Path) -> None:
    """Both versions' plans costed by this code's analytic model, each kernel at its best
    config: how much the other version's plan loses under this version's model."""
    from costmodel.oracle import CostOracle
    from costmodel.spec import load_target
    from search_space import load_graph
    from search_space.fusion import FusionContext
    from search_space.ir import make_group
    from search_space.zoo import build

    plans = [json.loads(p.read_text()) for p in (old, new)]
    rows = []
    for name, layers in MODELS.items():
        graph = load_graph(build(name, weights="inputs", layers=layers))
        oracle = CostOracle(graph, load_target("ascend910b"), ctx=FusionContext(graph))
        us = [
            sum(oracle.best(make_group(graph, o, k))[1] for o, k in p[name]["groups"])
            for p in plans
        ]
        rows.append(
            {
                "model": name,
                "old plan us": round(us[0], 1),
                "new plan us": round(us[1], 1),
                "old over new %": round(100 * (us[0] / us[1] - 1), 2),
            }
        )
    emit(rows, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--run", type=Path, help="write this version's plans to a JSON file")
    mode.add_argument("--compare", type=Path, nargs=2, metavar=("OLD", "NEW"))
    mode.add_argument(
        "--margin",
        type=Path,
        nargs=2,
        metavar=("OLD", "NEW"),
        help="cost both versions' plans under this code's model",
    )
    parser.add_argument(
        "--out", type=Path, help="the table (fusion_shift.csv, --margin: fusion_margin.csv)"
    )
    args = parser.parse_args()
    if args.run:
        run(args.run)
    elif args.margin:
        margin(*args.margin, args.out or RESULTS / "fusion_margin.csv")
    else:
        compare(*args.compare, args.out or RESULTS / "fusion_shift.csv")


if __name__ == "__main__":
    main()
