"""Fuzzing, the long profile (issue 23): many random valid graphs of the ops the tool fuses
(``tests/reliability/fuzz_graphs.py``), each through ``tune`` (analytic model, 3 trials) ->
``apply`` -> ``verify`` as the CI test runs them, counted by outcome per graph size.

    cd experiments && ../.venv/bin/python fuzz.py --examples 300 --seed 0   # -> results/fuzz.csv

Outcomes (``tests/reliability/fuzz_check.py``): ``accepted`` (the fused model equals the
original in onnxruntime and ``verify`` fails no kernel the plan keeps fused), ``clear error``
(one error line, exit 1), and the defects: ``traceback``, ``wrong exit``, ``invalid fused``,
``mismatch``, ``kernel failed``, ``verify not ok``. ``fused`` counts the plans' fused groups,
``unverified`` the kernels ``verify`` could not check (the CI test holds them at 0). Each
defect's model is saved under ``results/fuzz_defects/`` with what the command printed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import onnx
from _table import RESULTS, emit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from fuzz_check import CATEGORIES, DEFECTS, Outcome, check_model
from fuzz_graphs import graphs
from hypothesis import HealthCheck, Phase, given, seed, settings


def each_graph(examples: int, seed_: int, visit: Callable[[onnx.ModelProto], None]) -> None:
    """Call ``visit`` on ``examples`` models drawn from ``seed_``, printing progress every 25
    (generation only: every outcome is data, nothing raises, nothing shrinks)."""
    started, drawn = time.perf_counter(), [0]

    @seed(seed_)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(graphs())
    def one(model: onnx.ModelProto) -> None:
        visit(model)
        drawn[0] += 1
        if drawn[0] % 25 == 0:
            elapsed = time.perf_counter() - started
            print(f"{drawn[0]} examples, {elapsed:.0f} s", file=sys.stderr)

    one()


def save_defect(stem: Path, model: onnx.ModelProto, category: str, detail: str) -> None:
    """A defect's model (``stem``.onnx) and what went wrong (``stem``.txt)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, stem.with_suffix(".onnx"))
    stem.with_suffix(".txt").write_text(f"{category}\n{detail}\n")


def run(examples: int, seed_: int, defects: Path) -> list[tuple[int, Outcome]]:
    """Draw ``examples`` models from ``seed_`` and check each: (compute nodes, outcome)."""
    got: list[tuple[int, Outcome]] = []

    def visit(model: onnx.ModelProto) -> None:
        with tempfile.TemporaryDirectory() as folder:
            outcome = check_model(model, Path(folder))
        size = sum(n.op_type != "Constant" for n in model.graph.node)
        got.append((size, outcome))
        if outcome.category in DEFECTS:
            save_defect(
                defects / f"seed{seed_}_{len(got)}", model, outcome.category, outcome.detail
            )

    each_graph(examples, seed_, visit)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="models to draw")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws")
    parser.add_argument("--out", default=str(RESULTS / "fuzz.csv"), help="CSV to write")
    args = parser.parse_args()
    started = time.perf_counter()
    got = run(args.examples, args.seed, RESULTS / "fuzz_defects")
    wall = time.perf_counter() - started
    by_size: dict[str, list[Outcome]] = {}
    for nodes, outcome in sorted(got, key=lambda g: g[0]):
        by_size.setdefault(str(nodes) if nodes <= 8 else "9+", []).append(outcome)
    by_size["all"] = [o for _, o in got]
    rows = []
    for label, outcomes in by_size.items():
        counts = Counter(o.category for o in outcomes)
        rows.append(
            {
                "nodes": label,
                "examples": len(outcomes),
                **{c: counts.get(c, 0) for c in CATEGORIES},
                "fused": sum(o.fused for o in outcomes),
                "unverified": sum(o.unverified for o in outcomes),
            }
        )
    emit(rows, args.out, width=13)
    print(f"{len(got)} examples (seed {args.seed}) in {wall:.0f} s")
    bad = [(i, o) for i, (_, o) in enumerate(got, 1) if o.category in DEFECTS]
    for i, outcome in bad:
        print(f"example {i}: {outcome.category}: {outcome.detail.splitlines()[0][:200]}")
    if not bad:
        print("no defect")


if __name__ == "__main__":
    main()
