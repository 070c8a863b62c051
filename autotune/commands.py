"""CLI commands of the tuning workflow: ``tune``, ``report``, ``apply``, ``verify``.

Registered on the app of :mod:`autotune.cli` (shared options and error handling live there).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from autotune.cli import (
    Batch,
    BenefitOpt,
    ConfigOpt,
    InputShape,
    JsonOpt,
    Layers,
    LevelOpt,
    MaxOpsOpt,
    ModelArg,
    NoFuseOpt,
    PresetOpt,
    Scale,
    SeqLen,
    Weights,
    _policy,
    app,
    err,
    out,
    user_errors,
)
from autotune.models import ZooOptions, load_model_spec
from search_space import parse_input_shapes

__all__: list[str] = []


@app.command()
@user_errors
def tune(
    model: ModelArg,
    target: Annotated[str, typer.Option(help="Target name or a spec .toml path.")] = "ascend910b",
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a spec field, FIELD=VALUE.")
    ] = None,
    precision: Annotated[str, typer.Option(help="auto, fp32, fp16, bf16 or mixed.")] = "auto",
    trials: Annotated[int, typer.Option(help="Trials to run (added to a resumed study).")] = 120,
    timeout: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    sampler: Annotated[str, typer.Option(help="tpe, random, cmaes, gp or nsga2.")] = "tpe",
    strategy: Annotated[str, typer.Option(help="joint or bilevel.")] = "bilevel",
    objective: Annotated[str, typer.Option(help="latency or latency,memory.")] = "latency",
    storage: Annotated[
        str | None, typer.Option(help="Optuna storage URL or a .journal file.")
    ] = None,
    study: Annotated[str | None, typer.Option(help="Study name (same name resumes).")] = None,
    seed: Annotated[int, typer.Option(help="Sampler seed.")] = 0,
    measure_every: Annotated[
        int, typer.Option("--measure-every", help="Simulate the best plans every K trials.")
    ] = 20,
    pick: Annotated[
        int | None, typer.Option(help="Pareto trial number to save (latency,memory).")
    ] = None,
    cost: Annotated[
        str, typer.Option(help="Cost model scoring trials: learned or analytic.")
    ] = "learned",
    cost_model_file: Annotated[
        Path | None,
        typer.Option("--cost-model-file", help="A learned model from `calibrate --fit`."),
    ] = None,
    retrain_every: Annotated[
        int, typer.Option("--retrain-every", help="Refit the learned model every K rows.")
    ] = 32,
    polish: Annotated[
        int,
        typer.Option(
            help="At the end, descend in the model from the N best trials and measure each "
            "end (0: off)."
        ),
    ] = 1,
    dataset: Annotated[
        Path | None,
        typer.Option(help="Parquet file the measured kernels go to (default: beside storage)."),
    ] = None,
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    fusion_level: LevelOpt = None,
    no_fusion_ops: NoFuseOpt = None,
    max_fused_ops: MaxOpsOpt = None,
    benefit_threshold: BenefitOpt = None,
    no_share: Annotated[bool, typer.Option("--no-share", help="One class per edge.")] = False,
    unsafe: Annotated[
        bool, typer.Option("--unsafe", help="Skip numerical verification (safe mode off).")
    ] = False,
    output: Annotated[Path, typer.Option("-o", "--output", help="Plan file to write.")] = Path(
        "plan.json"
    ),
    input_shape: InputShape = None,
    json_out: JsonOpt = False,
    weights: Weights = "inputs",
    scale: Scale = 1.0,
    layers: Layers = None,
    batch: Batch = None,
    seq_len: SeqLen = None,
) -> None:
    """Tune fusion and tiling of a model with an Optuna study; write the best plan."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from autotune.tuner import TuneConfig, tune_graph
    from search_space.atomic import output_path

    output_path(output)  # fail before the study, not after it
    if dataset is not None:
        output_path(dataset)
    shapes = parse_input_shapes(input_shape or [])
    zoo = ZooOptions(weights, scale, layers, batch, seq_len)
    graph = load_model_spec(model, shapes, zoo)
    flags: dict[str, Any] = {
        "preset": preset,
        "fusion_level": fusion_level,
        "no_fusion_ops": no_fusion_ops,
        "max_fused_ops": max_fused_ops,
        "benefit_threshold": benefit_threshold,
    }
    if no_share:
        flags["share_repeated"] = False
    if unsafe:
        flags["safe_mode"] = False
    policy = _policy(config, **flags)
    cfg = TuneConfig(
        target=target,
        sets=tuple(set_ or ()),
        precision=precision,
        trials=trials,
        timeout=timeout,
        sampler=sampler,
        strategy=strategy,
        objective=objective,
        storage=storage,
        study=study,
        seed=seed,
        measure_every=measure_every,
        pick=pick,
        cost=cost,
        cost_model_file=str(cost_model_file) if cost_model_file else None,
        retrain_every=retrain_every,
        polish=polish,
        dataset=str(dataset) if dataset else None,
        policy=policy,
    )
    name = Path(model.removeprefix("zoo:")).stem
    from autotune.safety import make_safety
    from costmodel.spec import load_target

    safety = make_safety(
        graph, model, zoo, shapes, policy, load_target(target, tuple(set_ or ()), precision)
    )
    columns = (
        TextColumn("[bold]tuning[/] {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} trials"),
        TextColumn("best {task.fields[best]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(name, total=trials, best="-")

        def progress(n: int, best: float) -> None:
            bar.update(task, completed=n, best=f"{best:.1f} us" if best < float("inf") else "-")

        result = tune_graph(graph, cfg, name=name, progress=progress, safety=safety)
    path = result.plan.save(output)
    summary = {**result.to_json(), "plan": str(path)}
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    table = Table(
        title=f"{model}: study '{result.study}' ({result.trials} trials, storage "
        f"{result.storage})",
        show_header=False,
    )
    table.add_row("best (simulated)", f"{result.best_latency_us:.1f} us")
    table.add_row(
        "none / greedy (simulated)",
        f"{result.baseline_us['none']:.1f} / {result.baseline_us['greedy']:.1f} us",
    )
    table.add_row(
        "speedup",
        f"{summary['speedup_vs_none']:.2f}x vs none, "
        f"{summary['speedup_vs_greedy']:.2f}x vs greedy",
    )
    if result.report:
        table.add_row("safe fusion", ", ".join(f"{k} {v}" for k, v in result.report.items()))
    table.add_row("plan", f"{path} ({len(result.plan.groups)} kernels)")
    if result.interrupted:
        table.add_row("note", "interrupted: this is the best plan found so far")
    out.print(table)


@app.command()
@user_errors
def report(
    plan: Annotated[Path, typer.Argument(help="A plan file written by `autotune tune`.")],
    json_out: JsonOpt = False,
) -> None:
    """Report on a saved plan: safe-fusion counts, per-kernel table, speedups."""
    from autotune.report import plan_report
    from search_space.space import FusionPlan

    rep = plan_report(FusionPlan.load(plan))
    if json_out:
        sys.stdout.write(json.dumps(rep) + "\n")
        return
    head = Table(title=f"plan {plan} ({rep['model']} on {rep['target']})", show_header=False)
    head.add_row("kernels", str(rep["kernels"]))
    head.add_row("safe fusion", ", ".join(f"{k} {v}" for k, v in rep["safe_fusion"].items()))
    for key in ("predicted_us", "measured_us"):
        if rep.get(key):
            head.add_row(key.removesuffix("_us"), f"{rep[key]:.1f} us")
    for key in (
        "speedup_vs_none_estimated",
        "speedup_vs_none_measured",
        "speedup_vs_greedy_measured",
    ):
        if key in rep:
            head.add_row(key.replace("_", " "), f"{rep[key]:.2f}x")
    out.print(head)
    table = Table(title="kernels")
    for col in ("kernel", "kind", "us unfused", "us", "bound", "verdict"):
        table.add_column(col)
    for k in rep["per_kernel"]:
        name = k["ops"][0] + (f" +{len(k['ops']) - 1}" if len(k["ops"]) > 1 else "")
        table.add_row(
            escape(name),
            k["kind"],
            f"{k['us_unfused']:.1f}" if k["us_unfused"] is not None else "-",
            f"{k['us']:.1f}" if k["us"] is not None else "-",
            k["bound"],
            k["verdict"],
        )
    out.print(table)


@app.command()
@user_errors
def apply(
    model: ModelArg,
    plan: Annotated[Path, typer.Argument(help="A plan file for this model.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Fused .onnx to write.")],
    input_shape: InputShape = None,
    weights: Annotated[str, typer.Option(help="Zoo weights: 'random' or 'inputs'.")] = "random",
    scale: Scale = 1.0,
    layers: Layers = None,
    batch: Batch = None,
    seq_len: SeqLen = None,
) -> None:
    """Write the fused model: each fused group one ai.autofusion node (a local function)."""
    import onnx

    from autotune.apply import apply_plan
    from autotune.io import save_model
    from autotune.models import resolve_model
    from search_space.atomic import output_path
    from search_space.onnx import load_graph
    from search_space.space import FusionPlan

    output_path(output)
    shapes = parse_input_shapes(input_shape or [])
    source = resolve_model(model, ZooOptions(weights, scale, layers, batch, seq_len))
    proto = source if isinstance(source, onnx.ModelProto) else onnx.load(str(source))
    graph = load_graph(source, input_shapes=shapes)
    record = FusionPlan.load(plan, graph)
    fused = apply_plan(proto, graph, record.groups)
    path = save_model(fused, output)
    n = sum(1 for g in record.groups if len(g.ops) > 1)
    err.print(f"wrote {path}: {n} fused kernels as ai.autofusion functions")


@app.command()
@user_errors
def verify(
    model: ModelArg,
    plan: Annotated[Path, typer.Argument(help="A plan file for this model.")],
    json_out: JsonOpt = False,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    config: ConfigOpt = None,
    input_shape: InputShape = None,
    layers: Layers = None,
    scale: Scale = 1.0,
    batch: Batch = None,
    seq_len: SeqLen = None,
) -> None:
    """Check a plan: fused vs original in onnxruntime, and each fused kernel's numerics."""
    import onnx

    from autotune.apply import apply_plan
    from autotune.equivalence import graph_equivalence
    from autotune.models import resolve_model
    from autotune.verify import verify_kernels
    from costmodel.spec import load_target
    from search_space.onnx import load_graph
    from search_space.space import FusionPlan

    shapes = parse_input_shapes(input_shape or [])
    source = resolve_model(model, ZooOptions("random", scale, layers, batch, seq_len))
    proto = source if isinstance(source, onnx.ModelProto) else onnx.load(str(source))
    graph = load_graph(source, input_shapes=shapes)
    record = FusionPlan.load(plan, graph)
    policy = _policy(config)
    meta = dict(record.meta)
    target = load_target(
        meta.get("target_source", record.target), meta.get("sets", ()), record.precision
    )
    equiv = graph_equivalence(proto, apply_plan(proto, graph, record.groups), graph, seed)
    verdicts = verify_kernels(proto, graph, record.groups, target, policy, seed=seed)
    ok = bool(equiv["ok"]) and all(v.ok for v in verdicts)
    result = {"ok": ok, **equiv, "kernels": [v.to_json() for v in verdicts]}
    if json_out:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        out.print(
            f"graph equivalence: max abs err {equiv['graph_max_abs_err']:.3g} "
            f"(rel {equiv['graph_max_rel_err']:.3g})"
        )
        table = Table(title=f"fused kernels ({len(verdicts)} signatures)")
        for col in ("kernel", "ops", "cosine", "max abs err", "unfused", "verdict"):
            table.add_column(col)
        for v in verdicts:
            table.add_row(
                escape(v.ops[0]),
                str(len(v.ops)),
                f"{v.cosine:.6f}",
                f"{v.max_abs_err:.3g}",
                f"{v.unfused_max_abs_err:.3g}",
                escape(v.verdict),
            )
        out.print(table)
    if not ok:
        raise typer.Exit(1)
