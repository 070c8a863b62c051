"""Code-generation coverage of the zoo: what each plan's program is made of, its predicted
device time, and (on a device) its measured time.

For every zoo model under the plans none, greedy, max and a short tuned study (``--trials``
trials, analytic cost, safe mode on with ``codegen_check = off``), `generate` builds the
program; per row: the plan's groups, the kernels generated, the groups generated as one
kernel, the groups that run as their ops (and the distinct reasons, tensor names elided), the
ops run by the framework, the rule breaks of triton-ascend's documented constraints
(``ascend_rules``, advisory rules aside), the analytic cost model's predicted device time
summed over the groups and the predicted speedup (predicted none / predicted plan). With an
NPU or a CUDA GPU each plan's generated ``runner.Model`` forward is timed with
``triton.testing.do_bench`` (median) and the measured speedup (none / plan) is printed next
to the predicted one; without one only the coverage is reported (no kernel runs: the default
mode only generates). ``--check`` also runs `check_package` (every kernel against
onnxruntime; under Triton's CPU interpreter without a device, which is slow) and says ok per
row.

Default scale is the tests' small one: scale 0.05, batch 1, one layer for the transformers
(the CNNs keep their blocks), seq_len 8 for the encoders and decoders, cache_len 16 for the
decode steps. Total rows per plan sum the counts and take geometric means of the speedups; the
last total row is every row's groups, unfused groups and share generated as one kernel.

    cd experiments && ../.venv/bin/python bench_codegen.py
    cd experiments && ../.venv/bin/python bench_codegen.py --models bert-base gpt2 --quick
    cd experiments && ../.venv/bin/python bench_codegen.py --scale 0.25 --layers 2 --trials 32
    cd experiments && ../.venv/bin/python bench_codegen.py --models resnet50 --check
    cd experiments && ../.venv/bin/python bench_codegen.py --check --precision fp16 --csv x.csv

Writes experiments/results/codegen_coverage.csv (one row per model and plan, then the totals).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
from _table import RESULTS  # experiments/_table.py (scripts run from this folder)

from autotune import tune
from autotune.codegen.ascend_rules import check_ascend
from autotune.codegen.generate import Generated, generate
from autotune.estimate import plan_target
from costmodel.spec import Target, load_target
from search_space import Graph, load_graph
from search_space.onnx import read_model_with_data
from search_space.rules import Policy
from search_space.zoo import build, list_models

sys.path.append(str(Path(__file__).parent.parent / "tests"))  # the exports and their shapes
from conftest import EXPORT_FILES, EXPORTS, export_shapes

BASELINES = ("none", "greedy", "max")
NO_DEVICE = "no GPU or NPU: kernels run only under the CPU interpreter, timing skipped"
PRINTED = (
    "model", "plan", "groups", "kernels", "one_kernel", "unfused", "reasons", "framework_ops",
    "ascend_rules", "pred_us", "pred_x", "meas_us", "meas_x", "check", "gen_s", "study_s",
)  # fmt: skip
CSV_COLS = (
    "model", "plan", "scale", "batch", "layers", "seq_len", "cache_len", "groups", "kernels",
    "one_kernel", "one_kernel_share", "unfused", "reasons", "framework_ops", "ascend_rules",
    "pred_us", "pred_x", "meas_us", "meas_x", "check", "gen_s", "study_s", "error",
)  # fmt: skip


def accelerator() -> str | None:
    """npu or cuda when one is present, else None (asked as the generated runner asks)."""
    import torch

    if importlib.util.find_spec("torch_npu") is not None:
        import torch_npu  # noqa: F401  (registers the npu device)

        if torch.npu.is_available():  # type: ignore[attr-defined]
            return "npu"
    return "cuda" if torch.cuda.is_available() else None


def build_zoo(name: str, args: argparse.Namespace) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """A zoo model at the requested scale, with random weights; and how it was built."""
    info = next(i for i in list_models() if i.name == name)
    kw: dict[str, Any] = {}
    if info.family == "transformer":
        kw["layers"] = min(args.layers, info.layers)
    elif args.blocks is not None:
        kw["layers"] = max(info.min_layers, min(args.blocks, info.layers))
    if info.takes_seq_len:
        kw["seq_len"] = args.seq_len
    if info.takes_cache_len:
        kw["cache_len"] = args.cache_len
    model = build(name, weights="random", scale=args.scale, batch=args.batch, **kw)
    return model, kw


def tuned_plan(
    model: onnx.ModelProto, args: argparse.Namespace, shapes: dict[str, Any] | None = None
) -> tuple[Any, float]:
    """A short study's plan record (fresh journal in a temp folder) and its wall seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        plan = tune(
            model,
            input_shapes=shapes,
            trials=args.trials,
            cost="analytic",
            target=args.target,
            precision=args.precision,
            storage=str(Path(tmp) / "s.journal"),
            policy=Policy(codegen_check="off"),  # no interpreter run inside the study
        )
        return plan.record, time.perf_counter() - t0


def short_reason(reason: str) -> str:
    """A refusal with the tensor or op it names elided, so that reasons group."""
    return re.sub(r"'[^'\s]+'", "'…'", reason)


def coverage(gen: Generated, target: Target) -> dict[str, Any]:
    """Counts of a generated program (its kernels breaking triton-ascend's rules among them,
    advisory rules aside) and its predicted device time."""
    program = gen.program
    unfused = {g for g, _ in program.unfused}
    kernels_of = Counter(s.group for s in program.steps if s.kernel is not None)
    externs_of = Counter(s.group for s in program.steps if s.extern is not None)
    groups = len(gen.predicted) or len({s.group for s in program.steps if s.group >= 0})
    one = sum(
        1 for g in range(groups) if g not in unfused and kernels_of[g] == 1 and externs_of[g] == 0
    )
    return {
        "groups": groups,
        "kernels": len(program.kernels),
        "one_kernel": one,
        "one_kernel_share": _pct(one, groups),
        "unfused": len(unfused),
        "reasons": sorted({short_reason(r) for _, r in program.unfused}),
        "_by_reason": Counter(short_reason(r) for _, r in program.unfused),
        "framework_ops": len(program.externs),
        "ascend_rules": len(check_ascend(program, program.graph, target.spec)),
        "pred_us": round(sum(gen.predicted.values()), 2),
    }


def time_forward(model: onnx.ModelProto, graph: Graph, folder: Path) -> float:
    """Median microseconds of the generated Model's forward on the device."""
    import torch

    from autotune.codegen.execute import load_package
    from autotune.verify import draw_inputs

    pkg = load_package(folder)
    device = pkg.runner.DEVICE
    if device not in ("npu", "cuda"):
        raise RuntimeError(f"the runner picked {device} (AUTOTUNE_DEVICE?), not the device")
    import triton.testing  # after the runner: on the CPU it sets TRITON_INTERPRET first

    net = pkg.runner.Model(device=device)
    feeds = draw_inputs(model, graph, 0)
    inputs = [torch.as_tensor(feeds[t]).to(device) for t in pkg.INPUTS]
    with torch.no_grad():
        ms = triton.testing.do_bench(lambda: net(*inputs), return_mode="median")
    return float(ms) * 1000.0


def check_ok(gen: Generated, model: onnx.ModelProto, folder: Path) -> str:
    from autotune.codegen.check import check_package

    res = check_package(folder, model, gen.program)
    return "ok" if res.ok else f"FAIL groups {res.failing_groups}"


def bench_model(
    name: str, args: argparse.Namespace, target: Target, device: str | None
) -> list[dict[str, Any]]:
    """One model's rows, one per plan."""
    shapes = None
    if name.endswith(".onnx"):  # a real export (--exports) at its tests' shapes
        model, kw = read_model_with_data(EXPORTS / name), {}
        shapes = export_shapes(name, args.batch, args.seq_len)
        graph = load_graph(model, input_shapes=shapes)
    else:
        model, kw = build_zoo(name, args)
        graph = load_graph(model)
    plans: list[str] = ["none", "greedy"] if args.quick else [*BASELINES, "tuned"]
    rows = []
    for plan in plans:
        row: dict[str, Any] = {"model": name, "plan": plan, "scale": args.scale,
                               "batch": args.batch, **kw}  # fmt: skip
        rows.append(row)
        stage = "tune" if plan == "tuned" else "generate"
        try:
            study_s = math.nan
            if plan == "tuned":
                record, study_s = tuned_plan(model, args, shapes)
                plan_arg: Any = record
                tgt = plan_target(record)
            else:
                plan_arg, tgt = plan, target
            stage, t0 = "generate", time.perf_counter()
            gen = generate(model, graph, plan_arg, tgt, model_name=name)
            row["gen_s"] = round(time.perf_counter() - t0, 2)
            row["study_s"] = round(study_s, 1) if plan == "tuned" else ""
        except Exception as err:  # a plan that does not generate is a row, not a stop
            row["error"] = f"{stage}: {type(err).__name__}: {err}"[:200]
            continue
        row.update(coverage(gen, tgt))
        if not (device or args.check):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            folder = gen.write(Path(tmp) / "pkg")
            if device:
                try:
                    row["meas_us"] = round(time_forward(model, graph, folder), 2)
                except Exception as err:
                    row["error"] = f"timing: {type(err).__name__}: {err}"[:200]
            if args.check:
                try:
                    row["check"] = check_ok(gen, model, folder)
                except Exception as err:
                    row["check"] = "error"
                    row["error"] = f"check: {type(err).__name__}: {err}"[:200]
    base = next((r for r in rows if r["plan"] == "none" and "groups" in r), None)
    for r in rows:
        if base and "groups" in r and r["pred_us"] > 0:
            r["pred_x"] = round(base["pred_us"] / r["pred_us"], 3)
        if base and r.get("meas_us", math.nan) > 0 and base.get("meas_us", math.nan) > 0:
            r["meas_x"] = round(base["meas_us"] / r["meas_us"], 3)
    return rows


def _geomean(xs: Sequence[float]) -> float | str:
    xs = [x for x in xs if isinstance(x, float) and x > 0 and math.isfinite(x)]
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs)), 3) if xs else ""


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else ""


def totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per plan: summed counts, geomean speedups; then every row's counts."""
    out = []
    ok = [r for r in rows if "groups" in r]  # generated (timing or check may have failed)
    for plan in dict.fromkeys(r["plan"] for r in ok):
        part = [r for r in ok if r["plan"] == plan]
        out.append({**_total(part, plan),
                    "pred_us": round(sum(r["pred_us"] for r in part), 2),
                    "pred_x": _geomean([r.get("pred_x", math.nan) for r in part]),
                    "meas_x": _geomean([r.get("meas_x", math.nan) for r in part])})  # fmt: skip
    out.append(_total(ok, "all"))
    return out


def _total(rows: list[dict[str, Any]], plan: str) -> dict[str, Any]:
    """The counts of ``rows`` summed, as a total row for ``plan``."""
    groups = sum(r["groups"] for r in rows)
    one = sum(r["one_kernel"] for r in rows)
    return {
        "model": "total",
        "plan": plan,
        "groups": groups,
        "kernels": sum(r["kernels"] for r in rows),
        "one_kernel": one,
        "one_kernel_share": _pct(one, groups),
        "unfused": sum(r["unfused"] for r in rows),
        "ascend_rules": sum(r["ascend_rules"] for r in rows),
        "reasons": sorted({x for r in rows for x in r["reasons"]}),
        "framework_ops": sum(r["framework_ops"] for r in rows),
    }


def show(rows: list[dict[str, Any]], cols: Sequence[str], legend: dict[str, int]) -> None:
    """An aligned table (reasons as numbers into the legend printed below it)."""

    def cell(row: dict[str, Any], col: str) -> str:
        v = row.get(col, "")
        if col == "reasons":
            return ",".join(f"r{i}" for i in sorted(legend[x] for x in v))
        if col == "one_kernel" and row["model"] == "total" and row.get("one_kernel_share"):
            return f"{v} ({row['one_kernel_share']})"
        return "" if isinstance(v, float) and math.isnan(v) else str(v)

    cells = [[cell(r, c) for c in cols] for r in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(cols)]
    left = {"model", "plan", "reasons", "check"}

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.ljust(w) if c in left else v.rjust(w)
            for v, w, c in zip(values, widths, cols, strict=True)
        ).rstrip()

    print(line(cols))
    print(line(["-" * w for w in widths]))
    for i, (r, values) in enumerate(zip(rows, cells, strict=True)):
        if r["model"] == "total" and i and rows[i - 1]["model"] != "total":
            print(line(["-" * w for w in widths]))
        print(line(values))


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    present = {k for r in rows for k, v in r.items() if v not in ("", None, [])}
    cols = [c for c in CSV_COLS if c in present or c == "reasons"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols)
        writer.writeheader()
        for r in rows:
            out = {k: r.get(k, "") for k in cols}
            out["reasons"] = " | ".join(r.get("reasons", []))
            writer.writerow(out)
    print(f"wrote {path}")


def main() -> None:
    names = [m.name for m in list_models()]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=names, choices=names, metavar="MODEL")
    parser.add_argument("--quick", action="store_true", help="the none and greedy plans only")
    parser.add_argument(
        "--exports", action="store_true",
        help="the real torch exports of tests/fixtures/exports instead of the zoo",
    )  # fmt: skip
    parser.add_argument("--trials", type=int, default=8, help="trials of the tuned study")
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--layers", type=int, default=1, help="transformer layers (clipped)")
    parser.add_argument("--blocks", type=int, help="CNN blocks (default: the scaled default)")
    parser.add_argument("--seq-len", type=int, default=8, help="encoders and decoders")
    parser.add_argument("--cache-len", type=int, default=16, help="the decode steps")
    parser.add_argument("--target", default="ascend910b")
    parser.add_argument(
        "--precision", default="auto", help="the plans' mode: auto, fp32, fp16, bf16, mixed"
    )
    parser.add_argument(
        "--check", action="store_true", help="also check_package each plan (slow on the CPU)"
    )
    parser.add_argument("--csv", default=str(RESULTS / "codegen_coverage.csv"))
    args = parser.parse_args()

    t_start = time.perf_counter()
    device = accelerator()
    print(f"device: {device}" if device else NO_DEVICE, flush=True)
    blocks = "their scaled default" if args.blocks is None else args.blocks
    print(
        f"scale {args.scale}, batch {args.batch}, layers {args.layers} (transformers; CNN "
        f"blocks: {blocks}), seq_len {args.seq_len}, cache_len {args.cache_len}; target "
        f"{args.target} at precision {args.precision}; tuned: {args.trials} trials, analytic "
        "cost",
        flush=True,
    )
    target = load_target(args.target, (), args.precision)
    rows: list[dict[str, Any]] = []
    for name in EXPORT_FILES if args.exports else args.models:
        t0 = time.perf_counter()
        got = bench_model(name, args, target, device)
        rows += got
        errors = [f"{r['plan']}: {r['error']}" for r in got if "error" in r]
        print(f"{name}: {time.perf_counter() - t0:.1f} s" + "".join(f"\n  {e}" for e in errors),
              flush=True)  # fmt: skip
    for r in rows:
        r.setdefault("reasons", [])
    total = totals(rows)
    groups_by: Counter[str] = sum((r.get("_by_reason", Counter()) for r in rows), Counter())
    rows_by = Counter(x for r in rows for x in r["reasons"])
    legend = {x: i + 1 for i, (x, _) in enumerate(groups_by.most_common())}
    present = {k for r in rows + total for k, v in r.items() if v not in ("", None, [])}
    cols = [c for c in PRINTED if c in present]
    if any("error" in r for r in rows):
        cols.append("error")
    print()
    show(rows + total, cols, legend)
    print()
    for reason, i in legend.items():
        print(f"r{i}: {reason}  ({groups_by[reason]} groups in {rows_by[reason]} rows)")
    if not legend:
        print("every group of every plan was generated")
    print(f"wall {time.perf_counter() - t_start:.1f} s")
    write_csv(rows + total, Path(args.csv))


if __name__ == "__main__":
    main()
