"""Commands of the tuning workflow: ``tune``, ``report``, ``apply``, ``verify``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from autotune.cli.codegen import CodegenOpt, PlanArg, PlanPrecisionOpt, PlanTargetOpt
from autotune.cli.common import (
    POLICY_FLAGS,
    JsonOpt,
    ModelArg,
    ModelOptions,
    PolicyFlags,
    PrecisionOpt,
    SetOpt,
    TargetOpt,
    emit_json,
    err,
    model_and_plan,
    model_and_plan_or_baseline,
    model_options,
    out,
    policy_options,
    user_errors,
)

if TYPE_CHECKING:  # annotations only: the commands import what they run
    from autotune.tuner import Safety, TuneConfig, TuneResult
    from search_space.ir import Graph

__all__ = ["apply", "report", "tune", "verify"]


@user_errors
@model_options()
@policy_options(*POLICY_FLAGS)
def tune(
    model: ModelArg,
    opts: ModelOptions,
    policy: PolicyFlags,
    target: TargetOpt = "ascend910b",
    set_: SetOpt = None,
    precision: PrecisionOpt = "auto",
    trials: Annotated[
        int, typer.Option(help="Trials to add to the study; 0: the plan its storage holds.")
    ] = 120,
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
    no_share: Annotated[bool, typer.Option("--no-share", help="One class per edge.")] = False,
    unsafe: Annotated[
        bool, typer.Option("--unsafe", help="Skip numerical verification (safe mode off).")
    ] = False,
    output: Annotated[Path, typer.Option("-o", "--output", help="Plan file to write.")] = Path(
        "plan.json"
    ),
    json_out: JsonOpt = False,
) -> None:
    """Tune fusion and tiling of a model with an Optuna study; write the best plan."""
    # Long for its flags: typer reads the command line from this signature.
    from autotune.tuner import TuneConfig, make_safety
    from autotune.tuner.annotate import upload_artifact_file
    from autotune.tuner.study import journal_path
    from costmodel.spec import load_target
    from search_space.atomic import output_path

    # fail before the study, not after it; and never write over what the run reads
    given = opts.file(model)
    journal = journal_path(storage)
    output_path(output, {"model": given, "study's storage": journal, "--dataset": dataset})
    if dataset is not None:
        output_path(dataset, {"model": given, "study's storage": journal, "plan": output})
        _check_dataset(dataset)
    graph = opts.graph(model)
    extra = {"share_repeated": False} if no_share else {}
    if unsafe:
        extra["safe_mode"] = False
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
        policy=policy.load(**extra),
    )
    name = opts.name(model)
    tgt = load_target(target, cfg.sets, precision)
    safety = make_safety(graph, opts.reference(model), opts.zoo, cfg.policy, tgt)
    result = _run_with_progress(graph, cfg, name, safety)
    path = result.plan.save(output)
    if result.study:  # for `autotune dashboard` (a model with no work opens no study)
        upload_artifact_file(result.storage, result.study, path)
    if result.interrupted:  # the best plan so far is written; say so and exit as Ctrl-C does
        err.print(f"interrupted: wrote the best plan found so far to {path}", highlight=False)
        raise typer.Exit(130)
    _print_tune(model, result, path, json_out)


def _check_dataset(path: Path) -> None:
    """An existing ``--dataset`` must be a measurements table (Parquet): a study appends to
    it, and would write over anything else."""
    from autotune.exceptions import AutotuneError
    from search_space.atomic import file_head

    if file_head(path, 4) not in (b"", b"PAR1"):
        raise AutotuneError(
            f"--dataset '{path}' exists and is not a measurements table (Parquet); give a "
            "new path, or a table a study wrote"
        )


def _run_with_progress(
    graph: Graph, cfg: TuneConfig, name: str, safety: Safety | None
) -> TuneResult:
    """Run the study under a progress bar on stderr."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from autotune.tuner import tune_graph

    columns = (
        TextColumn("[bold]tuning[/] {task.description}: {task.fields[phase]}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} trials"),
        TextColumn("best predicted {task.fields[best]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(name, total=cfg.trials, best="-", phase="setup")

        def progress(n: int, best: float) -> None:
            bar.update(task, completed=n, best=f"{best:.1f} us" if best < float("inf") else "-")

        def phase(now: str) -> None:
            bar.update(task, phase=now)

        return tune_graph(graph, cfg, name=name, progress=progress, safety=safety, on_phase=phase)


def _print_tune(model: str, result: TuneResult, path: Path, json_out: bool) -> None:
    summary = {**result.to_json(), "plan": str(path)}
    if json_out:
        emit_json(summary)
        return
    table = Table(
        title=f"{model}: study '{result.study}' ({result.trials} trials, storage "
        f"{result.storage})",
        show_header=False,
    )

    def us(x: float | None) -> str:
        return "failed" if x is None else f"{x:.1f}"

    def times(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}x"

    base = result.baseline_us
    table.add_row("best (simulated)", f"{result.best_latency_us:.1f} us")
    table.add_row("none / greedy (simulated)", f"{us(base['none'])} / {us(base['greedy'])} us")
    table.add_row(
        "speedup",
        f"{times(result.speedup('none'))} vs none, {times(result.speedup('greedy'))} vs greedy",
    )
    if result.report:
        table.add_row("safe fusion", ", ".join(f"{k} {v}" for k, v in result.report.items()))
    table.add_row("plan", f"{path} ({len(result.plan.groups)} kernels)")
    if result.interrupted:
        table.add_row("note", "interrupted: this is the best plan found so far")
    out.print(table)


@user_errors
def report(
    plan: Annotated[Path, typer.Argument(help="A plan file written by `autotune tune`.")],
    json_out: JsonOpt = False,
    html: Annotated[
        Path | None, typer.Option(help="Also write one self-contained HTML page of plots.")
    ] = None,
    storage: Annotated[
        str | None, typer.Option(help="The study's storage, to plot its history (--html).")
    ] = None,
    study: Annotated[
        str | None, typer.Option(help="The study (default: the one the plan names).")
    ] = None,
) -> None:
    """Report on a saved plan: safe-fusion counts, per-kernel table, speedups."""
    from autotune.report import plan_report
    from search_space.space import FusionPlan

    record = FusionPlan.load(plan)
    if html is not None:
        _write_html(record, plan, html, storage, study)
    rep = plan_report(record)
    if json_out:
        emit_json(rep)
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


def _write_html(
    record: Any, plan: Path, path: Path, storage: str | None, study: str | None
) -> None:
    """The plan's HTML page (``report --html``), built under a progress bar."""
    from rich.progress import Progress

    from autotune.report_html import write_page

    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("report", total=7)

        def step(what: str) -> None:
            bar.update(task, advance=1, description=f"report: {what}")

        write_page(record, plan, path, storage, study, step)
    err.print(f"wrote {path}", highlight=False)


@user_errors
@model_options(weights="random")
def apply(
    model: ModelArg,
    opts: ModelOptions,
    plan: Annotated[Path, typer.Argument(help="A plan file for this model.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Fused .onnx to write.")],
    storage: Annotated[
        str | None,
        typer.Option(help="Also upload the fused model to this study storage's artifacts."),
    ] = None,
) -> None:
    """Write the fused model: each fused group one ai.autofusion node (a local function)."""
    from autotune.apply import apply_plan
    from autotune.tuner.annotate import upload_artifact_file
    from autotune.tuner.study import journal_path
    from search_space.atomic import output_path
    from search_space.onnx import save_model

    journal = journal_path(storage) if storage else None
    output_path(
        output,
        {
            "model": opts.file(model),
            "plan": plan,
            "--storage": journal,
        },
    )
    proto, graph, record = model_and_plan(model, opts, plan)
    fused = apply_plan(proto, graph, record.groups)
    path = save_model(fused, output)
    n = sum(1 for g in record.groups if len(g.ops) > 1)
    err.print(f"wrote {path}: {n} fused kernels as ai.autofusion functions")
    if storage is not None:  # the study the plan names, in the storage the user gives
        upload_artifact_file(storage, str(record.meta.get("study")), path, "application/onnx")
        err.print(f"uploaded {path.name} to the study's artifacts", highlight=False)


@user_errors
@model_options(weights=None)
@policy_options("preset", "strict_safety")
def verify(
    model: ModelArg,
    opts: ModelOptions,
    policy: PolicyFlags,
    plan: PlanArg,
    json_out: JsonOpt = False,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
    codegen: CodegenOpt = False,
    target: PlanTargetOpt = None,
    precision: PlanPrecisionOpt = None,
) -> None:
    """Check a plan: fused vs original in onnxruntime, and each fused kernel's numerics.

    PLAN may be a baseline; --codegen also checks the Triton kernels `autotune codegen` writes.
    """
    from autotune.apply import apply_plan
    from autotune.cli.codegen import codegen_check, print_codegen_check
    from autotune.verify import Status, graph_equivalence, verify_kernels

    pol = policy.load()
    proto, graph, record, tgt = model_and_plan_or_baseline(
        model, opts, plan, target, precision, pol
    )
    equiv = graph_equivalence(proto, apply_plan(proto, graph, record.groups), graph, seed)
    verdicts = verify_kernels(proto, graph, record.groups, tgt, pol, seed=seed)
    unverified = sum(v.status is Status.UNVERIFIED for v in verdicts)
    generated = codegen_check(proto, graph, record, tgt, model, seed) if codegen else None
    ok = bool(equiv["ok"]) and all(v.kept(pol.strict_safety) for v in verdicts)
    ok = ok and (generated is None or generated.ok)
    result = {
        "ok": ok,
        **equiv,
        "unverified": unverified,
        "kernels": [v.to_json() for v in verdicts],
        **({"codegen": generated.to_json()} if generated is not None else {}),
    }
    if json_out:
        emit_json(result)
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
        if unverified:
            out.print(
                f"{unverified} kernel signature(s) could not be verified"
                + (" (--strict-safety: not ok)" if pol.strict_safety else "")
            )
        if generated is not None:
            print_codegen_check(generated)
    if not ok:
        raise typer.Exit(1)
