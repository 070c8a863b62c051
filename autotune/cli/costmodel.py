"""Commands of the cost-model workflow: ``calibrate`` and ``costmodel eval``."""

from __future__ import annotations

import math
import os
import shlex
import sys
from concurrent.futures import Executor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autotune.cli.common import (
    JsonOpt,
    PrecisionOpt,
    SetOpt,
    TargetOpt,
    emit_json,
    err,
    out,
    user_errors,
)
from autotune.cli.flags import SEED_MAX, ForceOpt
from autotune.exceptions import AutotuneError

__all__ = ["calibrate", "costmodel_eval"]


def _sources(models: list[str], seed: int) -> list[tuple[str, str, Any]]:
    """(source, family, graph) for each --models entry; ``synthetic`` expands to its set."""
    from costmodel.measure.synthetic import synthetic_models
    from search_space import load_graph
    from search_space.zoo import load_model_spec

    found = []
    for spec in models:
        if spec == "synthetic":
            found += [
                (f"synthetic:{n}", "synthetic", load_graph(m)) for n, m in synthetic_models(seed)
            ]
            continue
        if not spec.startswith("zoo:") and not Path(spec).is_file():
            raise AutotuneError(
                f"model '{spec}' is neither zoo:NAME, 'synthetic' nor an existing ONNX file"
            )
        family = spec[4:] if spec.startswith("zoo:") else Path(spec).stem
        found.append((spec, family, load_model_spec(spec)))
        if spec.startswith("zoo:"):  # a small variant too: other shapes of the same family
            from search_space.zoo import ZooOptions

            small = load_model_spec(spec, zoo=ZooOptions(scale=0.25))
            found.append((f"{spec}@0.25", family, small))
    return found


def _default_table(target: str, suffix: str = "") -> Path:
    folder = Path("datasets/calibration")
    name = f"{Path(target).stem}{suffix}.parquet"
    return folder / name if folder.is_dir() else Path(name)


def _simulated_tables(given: list[Path] | None, target: str, written: Path) -> list[Path]:
    """The simulator tables a fit on hardware rows also uses: those given, or the target's
    under datasets/calibration/ (never the hardware table being written)."""
    if given:
        missing = [str(p) for p in given if not p.is_file()]
        if missing:
            raise AutotuneError(f"--table {missing[0]}: no such file")
        return list(given)
    from costmodel.measure import target_tables

    folder = Path("datasets/calibration")
    found = [
        p
        for p in target_tables(target, folder)
        if p.resolve() != written.resolve() and not p.stem.endswith("-real")
    ]
    if not found:
        raise AutotuneError(
            f"--fit with --from-msprof fits on simulator rows too, and there is no table for "
            f"'{target}' under {folder}/; make one with `autotune calibrate --target {target}` "
            "or pass --table"
        )
    return found


def _executor(
    dask: str | None, workers: int, timeout: float
) -> AbstractContextManager[Executor | None]:
    """--dask's executor (closed after), or none: the simulations then run in --jobs
    processes."""
    if dask is None:
        return nullcontext()
    from costmodel.measure.cluster import dask_executor

    return dask_executor(dask, workers=workers, timeout=timeout)


@user_errors
def calibrate(
    target: TargetOpt = "ascend910b",
    set_: SetOpt = None,
    precision: PrecisionOpt = "auto",
    samples: Annotated[int, typer.Option(help="Kernel runs to simulate (rows).")] = 3000,
    models: Annotated[
        list[str] | None,
        typer.Option(
            "--models", help="zoo:NAME, an ONNX file or 'synthetic' (repeat); default: all."
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option(help="Sampling seed, 0 .. 2^32-1.", min=0, max=SEED_MAX)
    ] = 0,
    warm: Annotated[
        float,
        typer.Option(help="Share of rows run after their plan's previous kernels (warm L2)."),
    ] = 0.2,
    jobs: Annotated[
        int,
        typer.Option(help="Simulator worker processes (with --dask local: workers).", min=0),
    ] = 0,
    dask: Annotated[
        str | None,
        typer.Option(
            "--dask",
            help="Simulate on a Dask cluster: 'local' (started on this machine) or the address "
            "of a scheduler you trust (tcp://HOST:8786).",
        ),
    ] = None,
    dask_timeout: Annotated[
        float, typer.Option(help="With --dask ADDRESS: seconds to wait for the scheduler.")
    ] = 10.0,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Table to write (default datasets/calibration/)."),
    ] = None,
    fit: Annotated[
        Path | None,
        typer.Option("--fit", help="Also fit constants + learned model on it; write it here."),
    ] = None,
    from_msprof: Annotated[
        Path | None,
        typer.Option(
            "--from-msprof",
            help="Measurements on a real NPU: an msprof op_summary or torch_npu "
            "kernel_details CSV of --model, or a real-data CSV (datasets/real/).",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="With --from-msprof: the model the profile ran."),
    ] = None,
    context: Annotated[
        str,
        typer.Option(
            help="With --from-msprof and a profile: where its kernels ran: in-situ (an "
            "application's run; inputs in L2) or isolated (msprof op, one op timed alone)."
        ),
    ] = "in-situ",
    table_in: Annotated[
        list[Path] | None,
        typer.Option(
            "--table",
            help="With --from-msprof --fit: simulator tables to fit on too (default: the "
            "target's under datasets/calibration/).",
        ),
    ] = None,
    hardware_weight: Annotated[
        float | None,
        typer.Option(
            help="With --fit: weight of a row measured on hardware against a simulated one "
            "(default: the two kinds weigh the same in total)."
        ),
    ] = None,
    json_out: JsonOpt = False,
    force: ForceOpt = False,
) -> None:
    """Simulate sampled kernels into a calibration table (or read an msprof profile), and
    optionally fit the analytic constants and the learned model on it."""
    # Long for its flags: typer reads the command line from this signature.
    from autotune.cli.progress import shown
    from costmodel.measure.sample import DEFAULT_MODELS, calibrate_tables
    from costmodel.spec import load_target
    from search_space.atomic import output_path

    if samples < 1:
        raise AutotuneError(f"--samples must be >= 1, but got {samples}")
    if not 0.0 <= warm <= 1.0:
        raise AutotuneError(f"--warm must be a fraction in [0, 1], but got {warm}")
    if hardware_weight is not None and not 0 < hardware_weight < math.inf:
        raise AutotuneError(f"--hardware-weight must be a number > 0, but got {hardware_weight}")
    if dask is not None and from_msprof is not None:
        raise AutotuneError("--dask runs simulations; --from-msprof reads measurements instead")
    if context not in ("in-situ", "isolated"):
        raise AutotuneError(f"--context {context!r} is not one of: in-situ, isolated")
    if not 0 < dask_timeout < math.inf:
        raise AutotuneError(f"--dask-timeout must be seconds > 0, but got {dask_timeout}")
    tgt = load_target(target, tuple(set_ or ()), precision)
    hardware = from_msprof is not None
    read: dict[str, str | Path | None] = {
        f"--models {m}": m for m in models or () if not m.startswith("zoo:")
    }
    read.update({"--from-msprof file": from_msprof, "--model": model if model else None})
    read.update({f"--table {t}": t for t in table_in or ()})
    default = _default_table(target, "-real" if hardware else "")
    table = output_path(output or default, read, "parquet", force)
    if fit is not None:
        output_path(fit, {**read, "table (-o)": table}, "cost_model", force)
    command = "autotune " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    fit_tables = [table]
    if from_msprof is not None:
        from costmodel.measure.msprof import hardware_table

        if fit is not None:  # checked before any work
            fit_tables = [*_simulated_tables(table_in, target, table), table]
        summary = hardware_table(from_msprof, model, tgt, table, command=command, context=context)
        for line in summary.pop("problems", []):
            err.print(line, highlight=False, markup=False)
    else:
        with _executor(dask, jobs, dask_timeout) as executor:  # first: a bad address fails fast
            sources = _sources(list(models or DEFAULT_MODELS), seed)
            with shown("calibrating", "kernels simulated") as job:
                job.phase("simulating")
                summary = calibrate_tables(
                    sources,
                    tgt,
                    table,
                    samples=samples,
                    seed=seed,
                    warm=warm,
                    jobs=jobs or os.cpu_count() or 1,
                    executor=executor,
                    command=command,
                    progress=job.advance,
                    on_total=job.total,
                )
    if fit is not None:
        from costmodel.learned import fit_learned

        learned = fit_learned(fit_tables, tgt, hardware_weight=hardware_weight)
        learned.save(fit)
        summary["model"] = str(fit)
        summary["fit"] = learned.trained_on
    if json_out:
        emit_json(summary)
        return
    t = Table(show_header=False, title=f"calibration table {summary['path']}")
    for k, v in summary.items():
        t.add_row(k, str(v))
    out.print(t)


DEFAULT_HOLDOUT = ("gpt2", "resnet50")


def _tables(tables: list[Path] | None, target: str) -> list[Path]:
    """The tables given, else the target's tables under datasets/calibration/
    (:func:`~costmodel.measure.target_tables`; the caller drops their hardware rows)."""
    if tables:
        return tables
    from costmodel.measure import target_tables

    folder = Path("datasets/calibration")
    found = target_tables(target, folder)
    if not found:
        raise AutotuneError(
            f"no calibration table for '{target}' under {folder}/; make one with "
            f"`autotune calibrate --target {target}` or pass --table"
        )
    return found


@user_errors
def costmodel_eval(
    csv: Annotated[
        list[Path] | None,
        typer.Argument(help="With --real: real-data CSVs (default datasets/real/*.csv)."),
    ] = None,
    real: Annotated[
        bool,
        typer.Option("--real", help="Against real measured kernel times instead of the tables."),
    ] = False,
    target: TargetOpt = "ascend910b",
    set_: SetOpt = None,
    precision: PrecisionOpt = "auto",
    table: Annotated[
        list[Path] | None,
        typer.Option("--table", help="Calibration table(s) (default datasets/calibration/)."),
    ] = None,
    holdout: Annotated[
        str, typer.Option(help="Model families held out for testing, comma-separated.")
    ] = ",".join(DEFAULT_HOLDOUT),
    kind: Annotated[str, typer.Option(help="Learned regressor: hgb, forest or ridge.")] = "hgb",
    json_out: JsonOpt = False,
) -> None:
    """Accuracy of the raw analytic, calibrated analytic and learned models on held-out
    kernels (families held out, then signatures seen in training removed), or with --real
    of every model against real measured kernel times."""
    if real:
        _eval_real(csv or [], json_out)
        return
    if csv:
        raise AutotuneError("CSV files are read with --real; a calibration table is --table")
    from costmodel.learned import DEFAULT_PARAMS, KINDS, METRICS, evaluate_models, on_hardware
    from costmodel.measure import read_table
    from costmodel.spec import load_target

    if kind not in KINDS:
        raise AutotuneError(f"unknown --kind '{kind}'; available: {', '.join(KINDS)}")
    tgt = load_target(target, tuple(set_ or ()), precision)
    frame = read_table(_tables(table, target))
    if not table:  # the shipped models are fitted on simulated rows only: so is this check
        frame = frame[~on_hardware(frame)]
    frame = frame[frame["target"] == tgt.spec.name]
    if frame.empty:
        raise AutotuneError(f"the tables hold no rows measured on '{tgt.spec.name}'")
    families = [f.strip() for f in holdout.split(",") if f.strip()]
    params = None if kind == "hgb" else {**DEFAULT_PARAMS, "kind": kind}  # hgb: selected
    result = evaluate_models(frame, tgt, families, params=params)
    if json_out:
        emit_json(result)
        return
    rows = result["rows"]
    t = Table(
        title=f"held-out accuracy on {tgt.spec.name}: train {rows['train']} rows "
        f"({rows['train_signatures']} signatures), test {rows['test']} rows "
        f"({rows['test_signatures']} signatures, families {', '.join(families)})"
    )
    t.add_column("model")
    for m in METRICS:
        t.add_column(m, justify="right")
    for name in ("analytic", "calibrated", "learned"):
        t.add_row(name, *(f"{result[name][m]:.3f}" for m in METRICS))
    out.print(t)
    if rows["test_warm"]:
        mape = ", ".join(f"{k} {v:.3f}" for k, v in result["warm_mape"].items())
        out.print(f"MAPE on the {rows['test_warm']} warm test rows (inputs in L2): {mape}")


def _real_files(csv: list[Path]) -> list[Path]:
    if csv:
        return csv
    folder = Path("datasets/real")
    found = sorted(folder.glob("*.csv")) if folder.is_dir() else []
    if not found:
        raise AutotuneError(
            f"no real-data CSV under {folder}/; pass files: autotune costmodel eval --real A.csv"
        )
    return found


def _eval_real(csv: list[Path], json_out: bool) -> None:
    """``costmodel eval --real``: every model against the real rows, per source, family and
    chip; a row that cannot be read is one line on stderr and skipped."""
    from costmodel.measure.real import predict_rows, read_real, summarize
    from costmodel.registry import make_cost_model

    rows, problems = read_real(_real_files(csv))
    skipped = [str(p) for p in problems]
    if not rows:
        for line in skipped:
            err.print(line, highlight=False, markup=False)
        raise AutotuneError("no readable real-data row; see the lines above")
    preds = predict_rows(rows, make_cost_model)
    skipped += [f"{x.row.path} row {x.row.row}: {x.error}; skipped" for x in preds if x.error]
    for line in skipped:
        err.print(line, highlight=False, markup=False)
    summary = summarize(preds)
    summary["skipped"] = skipped
    if json_out:
        summary["per_row"] = [p.to_json() for p in preds]
        emit_json(summary)
        return
    for title, block in (
        ("device-time rows", summary.get("overall_device")),
        ("host-time rows", summary.get("overall_host")),
    ):
        if not block:
            continue
        t = Table(title=f"{title}: predicted vs real")
        for col in ("model", "rows", "geomean", "median |ln|", "within 25%", "spearman"):
            t.add_column(col, justify="left" if col == "model" else "right")
        for name, m in block.items():
            if m["n"]:
                rho = "-" if m["spearman"] is None else f"{m['spearman']:.3f}"
                t.add_row(
                    name,
                    str(m["n"]),
                    f"{m['geomean']:.3f}",
                    f"{m['median_abs_log']:.3f}",
                    f"{m['within_25']:.0%}",
                    rho,
                )
        out.print(t)
    t = Table(title="geomean predicted / real by family (default configs)")
    for col in ("family", "rows", "simulator", "analytic", "learned", "naive"):
        t.add_column(col)
    for fam, fb in summary["by_family"].items():
        cells = [
            fb.get(m, {})
            for m in ("simulator/default", "analytic/default", "learned/default", "naive")
        ]
        t.add_row(
            fam,
            str(fb["naive"]["n"]),
            *(f"{c['geomean']:.2f}" if c.get("n") else "-" for c in cells),
        )
    out.print(t)
