"""The ``tune`` command: a study on a model, under a progress bar; the plan it writes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

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
    model_options,
    out,
    policy_options,
    user_errors,
)
from autotune.cli.flags import SEED_MAX, ForceOpt

if TYPE_CHECKING:  # annotations only: the commands import what they run
    from autotune.tuner import Safety, TuneConfig, TuneResult
    from search_space.ir import Graph
    from search_space.shapes import BucketGraphs

__all__ = ["tune"]


def _trials_word(ctx: typer.Context, value: str) -> str:
    """``--trials``: what :func:`~autotune.tuner.config.trials_arg` reads (a whole number or
    ``auto``), else a usage error (exit 2, as for any flag of the wrong type)."""
    if ctx.resilient_parsing:  # shell completion: nothing to check, nothing to import
        return value
    from autotune.exceptions import AutotuneError
    from autotune.tuner.config import trials_arg

    try:
        trials_arg(value)
    except AutotuneError:
        raise typer.BadParameter("give a number of trials, or 'auto'") from None
    return value


@user_errors
@model_options(ranges=True)
@policy_options(*POLICY_FLAGS)
def tune(
    model: ModelArg,
    opts: ModelOptions,
    policy: PolicyFlags,
    target: TargetOpt = "ascend910b",
    set_: SetOpt = None,
    precision: PrecisionOpt = "auto",
    trials: Annotated[
        str,
        typer.Option(
            help="Trials to add to the study; 0: the plan its storage holds; auto: up to 400, "
            "stopping once 30 in a row gained nothing.",
            callback=_trials_word,
        ),
    ] = "120",
    timeout: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    sampler: Annotated[str, typer.Option(help="tpe, random, cmaes, gp or nsga2.")] = "tpe",
    strategy: Annotated[str, typer.Option(help="joint or bilevel.")] = "bilevel",
    objective: Annotated[str, typer.Option(help="latency or latency,memory.")] = "latency",
    storage: Annotated[
        str | None, typer.Option(help="Optuna storage URL or a .journal file.")
    ] = None,
    study: Annotated[str | None, typer.Option(help="Study name (same name resumes).")] = None,
    new: Annotated[
        bool,
        typer.Option(
            "--new",
            help="Start a fresh study where the storage has one of this name (the default "
            "name takes a -2, -3... suffix; the old study is kept).",
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help="Sampler seed, 0 .. 2^32-1.", min=0, max=SEED_MAX)] = 0,
    measure_every: Annotated[
        int, typer.Option("--measure-every", help="Simulate the best plans every K trials.")
    ] = 20,
    pick: Annotated[
        int | None, typer.Option(help="Pareto trial number to save (latency,memory).", min=0)
    ] = None,
    cost: Annotated[
        str,
        typer.Option(
            help="Cost model scoring trials: learned, analytic or any registered kind "
            "(simulator: exact and slow)."
        ),
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
    search_buckets: Annotated[
        int,
        typer.Option(
            "--search-buckets",
            help="With --shape-range: buckets the search weighs (each for its neighbours); "
            "the best plans are then measured at every bucket.",
        ),
    ] = 4,
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
    force: ForceOpt = False,
) -> None:
    """Tune fusion and tiling of a model with an Optuna study; write the best plan."""
    # Long for its flags: typer reads the command line from this signature.
    from autotune.plan_file import save_plan
    from autotune.tuner import TuneConfig, make_safety
    from autotune.tuner.annotate import upload_artifact_file
    from autotune.tuner.config import trials_arg
    from autotune.tuner.study import journal_path
    from costmodel.spec import load_target
    from search_space.atomic import output_path

    # fail before the study, not after it; and never write over what the run reads
    count, patience = trials_arg(trials)
    given = opts.file(model)
    journal = journal_path(storage)
    if journal is not None:  # written all along the study: its folder must take it
        output_path(journal, {"model": given})
    read = {"model": given, "study's storage": journal or _sqlite_file(storage)}
    output_path(output, {**read, "--dataset": dataset}, "plan", force)
    if dataset is not None:
        output_path(dataset, {**read, "plan": output})
        if not force:
            _check_dataset(dataset)
    buckets = opts.ranged_graphs(model)
    graph = opts.graph(model) if buckets is None else buckets.reference
    extra = {"share_repeated": False} if no_share else {}
    if unsafe:
        extra["safe_mode"] = False
    cfg = TuneConfig(
        target=target,
        sets=tuple(set_ or ()),
        precision=precision,
        trials=count,
        patience=patience,
        timeout=timeout,
        sampler=sampler,
        strategy=strategy,
        objective=objective,
        storage=storage,
        study=study,
        new=new,
        seed=seed,
        measure_every=measure_every,
        pick=pick,
        cost=cost,
        cost_model_file=str(cost_model_file) if cost_model_file else None,
        retrain_every=retrain_every,
        polish=polish,
        dataset=str(dataset) if dataset else None,
        policy=policy.load(**extra),
        search_buckets=search_buckets,
    )
    name = opts.name(model)
    tgt = load_target(target, cfg.sets, precision)
    zoo = opts.zoo if buckets is None else opts.zoo_at(model, buckets.buckets[-1].values)
    safety = make_safety(graph, opts.reference(model), zoo, cfg.policy, tgt)
    result = _run_with_progress(graph, cfg, name, safety, buckets)
    path = save_plan(result.plan, output)
    if result.study:  # for `autotune dashboard` (a model with no work opens no study)
        upload_artifact_file(result.storage, result.study, path)
    if result.interrupted:  # the best plan so far is written; say so and exit as Ctrl-C does
        err.print(f"interrupted: wrote the best plan found so far to {path}", highlight=False)
        raise typer.Exit(130)
    _print_tune(model, result, path, json_out)


def _sqlite_file(storage: str | None) -> str | None:
    """The database file of a ``sqlite:///FILE`` storage (None for any other)."""
    prefix = "sqlite:///"
    return storage[len(prefix) :] if storage and storage.startswith(prefix) else None


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
    graph: Graph, cfg: TuneConfig, name: str, safety: Safety | None, buckets: BucketGraphs | None
) -> TuneResult:
    """Run the study: on a terminal under a progress bar (phase, trials, best, time and the
    trials' ETA) that stays when the run ends; elsewhere (a log, nohup, CI) with a line per
    phase and every few trials on stderr (:mod:`autotune.progress`)."""
    from rich.markup import escape
    from rich.progress import BarColumn, TextColumn

    from autotune.cli.console import printable
    from autotune.cli.progress import live_bar
    from autotune.tuner import tune_graph

    if not err.is_terminal:
        return tune_graph(graph, cfg, name=name, safety=safety, buckets=buckets)
    columns = (
        TextColumn("[bold]tuning[/] {task.description}: {task.fields[phase]}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} trials"),
        TextColumn("best predicted {task.fields[best]}"),
    )
    with live_bar(*columns) as bar:
        # the bar's text is markup that bypasses the console's escaping: the name is escaped
        label = escape(printable(name, one_line=True))
        task = bar.add_task(label, total=cfg.trials, best="-", phase="setup")

        def progress(n: int, best: float) -> None:
            shown = f"{best:.1f} us" if best < float("inf") else "-"
            bar.update(task, completed=n, best=shown)

        def phase(now: str) -> None:
            bar.update(task, phase=now)

        result = tune_graph(
            graph,
            cfg,
            name=name,
            progress=progress,
            safety=safety,
            on_phase=phase,
            buckets=buckets,
        )
        bar.update(task, phase="done")
        return result


def _print_tune(model: str, result: TuneResult, path: Path, json_out: bool) -> None:
    from autotune.vocabulary import describe

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
    table.add_row("latency", describe(result.latency()))
    table.add_row("none / greedy", f"{us(base['none'])} / {us(base['greedy'])} us simulated")
    table.add_row(
        "speedup",
        f"{times(result.speedup('none'))} vs none, {times(result.speedup('greedy'))} vs greedy"
        " (simulated)",
    )
    gap = result.gap_to_optimal()
    if gap is not None:
        table.add_row(
            "exact optimum (predicted)",
            f"{result.optimal_predicted_us:.1f} us; this plan {result.predicted_us:.1f} us "
            f"predicted, {gap:+.1%}",
        )
    if result.trials_since_best is not None:
        since = result.trials_since_best
        table.add_row(
            "search",
            f"no gain in the last {since} of {result.trials} trials"
            if since
            else "the last trial improved the best: more trials may gain",
        )
    if result.report:
        table.add_row("safe mode", ", ".join(f"{k} {v}" for k, v in result.report.items()))
    table.add_row("plan", f"{path} ({len(result.plan.groups)} kernels)")
    if result.interrupted:
        table.add_row("note", "interrupted: this is the best plan found so far")
    out.print(table)
