"""Compiling generated kernels for a CUDA target with no GPU: the kernels CI leaves out.

``tests/autotune/test_codegen_compile.py`` compiles one kernel of each code shape (its body
but for numbers, its launch, its pointer types: ``compile_check.code_shape``) of a few
packages, less the cube kernels whose ``tl.dot`` operand tiles pass 256 KB (a minute on two
cores). This script compiles the rest: by default the heavy kernels of llama3-8b; with
``--sweep``, one kernel of each code shape of every zoo model under none, greedy and max at
the CI scale (the shapes no earlier model showed), so every kind of generated code is
compiled once. Per kernel: its L1 operand bytes (``kernel_text.footprint``), whether it
compiled, registers, PTX lines and seconds.

    cd experiments && ../.venv/bin/python bench_codegen_compile.py
    cd experiments && ../.venv/bin/python bench_codegen_compile.py --model bert-base --min-l1 0
    cd experiments && ../.venv/bin/python bench_codegen_compile.py --sweep

Writes experiments/results/codegen_compile.csv (``--sweep``: codegen_compile_sweep.csv).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _table import RESULTS, emit

from autotune.codegen.compile_check import code_shape, compile_package
from autotune.codegen.generate import generate
from autotune.codegen.kernel_text import footprint
from autotune.codegen.program import Program, Step
from autotune.zoo import build, list_models
from costmodel.spec import load_target
from search_space import load_graph

CI_SCALE = 0.05


def _zoo(name: str, scale: float, layers: int, ci: bool) -> Any:
    """A zoo model (``ci``: at the shapes of the CI tests: batch 1, seq 8, cache 16)."""
    info = next(i for i in list_models() if i.name == name)
    kw: dict[str, Any] = {"layers": layers} if info.family == "transformer" else {}
    if ci:
        kw["batch"] = 1
        kw.update({"seq_len": 8} if info.takes_seq_len else {})
        kw.update({"cache_len": 16} if info.takes_cache_len else {})
    return build(name, weights="random", scale=scale, **kw)


def _compile_rows(
    model_name: str, plans: list[str], scale: float, layers: int, keep: Callable[..., bool]
) -> list[dict[str, Any]]:
    """Each kernel ``keep(kernel, graph)`` selects, compiled alone: one row each (at the CI
    shapes at scale 0.05)."""
    model = _zoo(model_name, scale, layers, ci=scale == CI_SCALE)
    graph = load_graph(model)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for plan in plans:
            gen = generate(model, graph, plan, load_target("ascend910b"), model_name=model_name)
            folder = gen.write(Path(tmp) / plan)
            for k in [k for k in gen.program.kernels if keep(k, graph)]:
                t0 = time.perf_counter()
                (res,) = compile_package(folder, graph, Program(graph, (Step(0, kernel=k),), ()))
                rows.append({"model": model_name, "plan": plan, "kernel": k.name[:40],
                             "template": k.template, "l1_bytes": footprint(k, graph).cube,
                             "ok": res.ok, "registers": res.registers,
                             "ptx_lines": res.ptx_lines,
                             "seconds": round(time.perf_counter() - t0, 1),
                             "error": res.error[:80]})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--plans", nargs="*", default=["none", "greedy", "max"])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--min-l1", type=int, default=256 * 1024, help="operand bytes")
    parser.add_argument("--sweep", action="store_true", help="every zoo model, each code shape")
    parser.add_argument("--csv", default="")
    args = parser.parse_args()
    if args.sweep:
        seen: set[tuple[object, ...]] = set()

        def first_of_shape(k: Any, graph: Any) -> bool:
            key = code_shape(k, graph)
            new = key not in seen
            seen.add(key)
            return new

        rows = []
        for m in (i.name for i in list_models()):
            rows += _compile_rows(m, args.plans, CI_SCALE, args.layers, first_of_shape)
        emit(rows, args.csv or RESULTS / "codegen_compile_sweep.csv")
        bad = [r for r in rows if not r["ok"]]
        print(f"{len(rows)} distinct kernels, {len(bad)} failed to compile")
        return
    rows = _compile_rows(args.model, args.plans, args.scale, args.layers,
                         lambda k, g: footprint(k, g).cube >= args.min_l1)  # fmt: skip
    if not rows:
        print(f"no kernel of {args.model} has operand tiles of {args.min_l1} B or more")
        return
    emit(rows, args.csv or RESULTS / "codegen_compile.csv")


if __name__ == "__main__":
    main()
