"""Calibration rows from a real NPU: the Ascend profiler's op summary (``msprof``), torch_npu's
``kernel_details.csv``, or a real-data CSV of published timings (``datasets/real/``).

``msprof --application=... --aic-metrics=PipeUtilization`` writes ``op_summary_*.csv`` with
one row per task; torch_npu's profiler writes the same facts as ``kernel_details.csv``
(``Name``, ``Type``, ``Accelerator Core``, ``Duration(us)``, ``Input Shapes``, ``Block Dim``,
read as the columns below). Columns read (others are ignored):

* ``Op Name``: the operator's name; matched to an ONNX node of the same name (ATC keeps node
  names for ops it does not fuse);
* ``OP Type``: its CANN type (``MatMulV2``, ``Conv2D``, ``SoftmaxV2``...), used with
  ``Input Shapes`` to match a node when the name does not;
* ``Task Type``: only ``AI_CORE``, ``AI_VECTOR_CORE`` and ``MIX_AIC``/``MIX_AIV`` rows are used
  (``AI_CPU`` tasks do not run on the cores this tool models);
* ``Task Duration(us)``: the measured latency;
* ``Input Shapes``: ``"1,128,768;768,768"`` (tensors separated by ``;``);
* ``Block Dim`` (optional): the cores the task ran on, used as the config's ``block_dim``;
* ``aic_mte2_time(us)``, ``aic_mac_time(us)``, ``aic_fixpipe_time(us)``, ``aiv_vec_time(us)``,
  ``aiv_mte3_time(us)``, ``aic_mte1_time(us)`` (optional): per-pipe busy times.

Each matched row becomes the op alone, lowered with its default config (block_dim from the
profile), with the profiled duration plus the spec's gap between kernels as its latency (a
task duration is the kernel alone on the device; every model's latency includes the gap).
Rows that match no node are counted and skipped. A real-data CSV needs no model: each of its
rows names its op and shapes (:mod:`costmodel.measure.real.records`).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.analytic import AnalyticModel
from costmodel.base import KernelCost
from costmodel.exceptions import InfeasibleConfig, MeasurementError
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.measure.record import PROFILE_VERSION, Provenance, measurements
from costmodel.measure.table import measured_pipes, update_manifest, write_table
from costmodel.residency import written_tensors
from costmodel.spec import Target
from search_space.fusion import FusionContext
from search_space.ir import Graph
from search_space.zoo import load_model_spec

__all__ = [
    "CANN_TYPES",
    "ProfiledTask",
    "csv_header",
    "hardware_table",
    "is_real_csv",
    "msprof_table",
    "read_op_summary",
    "situated",
]

log = logging.getLogger(__name__)

CANN_TYPES = {
    "MatMulV2": "MatMul",
    "MatMulV3": "MatMul",
    "BatchMatMul": "MatMul",
    "BatchMatMulV2": "MatMul",
    "Conv2D": "Conv",
    "Conv2DV2": "Conv",
    "SoftmaxV2": "Softmax",
    "LayerNormV3": "LayerNormalization",
    "LayerNorm": "LayerNormalization",
    "TransposeD": "Transpose",
    "GatherV2": "Gather",
    "FastGelu": "Gelu",
    "ReduceMeanD": "ReduceMean",
    "ReduceSumD": "ReduceSum",
    "RealDiv": "Div",
    "Pooling": "MaxPool",
}
CONTEXTS = ("in-situ", "isolated")  # where a profile's kernels ran (msprof_table)
_CORE_TASKS = {"AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV"}
_PIPES = {
    "MTE2": "aic_mte2_time(us)",
    "MTE1": "aic_mte1_time(us)",
    "M": "aic_mac_time(us)",
    "FIX": "aic_fixpipe_time(us)",
    "V": "aiv_vec_time(us)",
    "MTE3": "aiv_mte3_time(us)",
}
_REQUIRED = ("Op Name", "OP Type", "Task Type", "Task Duration(us)", "Input Shapes")
# torch_npu's kernel_details.csv names the same columns differently
_KERNEL_DETAILS = {
    "Name": "Op Name",
    "Type": "OP Type",
    "Accelerator Core": "Task Type",
    "Duration(us)": "Task Duration(us)",
}
_REAL_COLUMNS = {"chip", "op", "shapes", "time_us"}  # a real-data CSV (datasets/real/)


@contextlib.contextmanager
def _reading(path: str | Path) -> Iterator[None]:
    """A file that cannot be read, or is not CSV text, as one clear error naming it."""
    try:
        yield
    except OSError as err:
        raise MeasurementError(f"cannot read '{path}': {err.strerror or err}") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise MeasurementError(
            f"'{path}' is not an msprof op_summary CSV ({type(err).__name__}); pass the "
            "op_summary_*.csv that msprof writes"
        ) from None


def csv_header(path: str | Path) -> list[str]:
    """The stripped column names of a CSV file (empty for an empty file).

    Raises:
        MeasurementError: unreadable or not text.
    """
    with _reading(path), Path(path).open(newline="", encoding="utf-8-sig") as fh:
        return [h.strip() for h in next(csv.reader(fh), [])]


def is_real_csv(header: list[str]) -> bool:
    return _REAL_COLUMNS <= set(header)


def _shapes(text: str) -> tuple[tuple[int, ...], ...]:
    text = text.strip().strip('"')
    if not text:
        return ()
    out = []
    for part in text.split(";"):
        part = part.strip()
        out.append(tuple(int(d) for d in part.split(",") if d.strip()) if part else ())
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ProfiledTask:
    """One AI-core task of a profile, as measured.

    Attributes:
        name: the op's name (``Op Name``), as ATC kept the ONNX node's.
        op_type: its CANN type (``OP Type``: ``MatMulV2``, ``SoftmaxV2``...).
        duration_us: the task's duration on the device (the gap before it not included).
        shapes: each input's dims (``Input Shapes``).
        block_dim: the cores it ran on; 0 where the profile does not say.
        pipes: per pipe (``MTE2``, ``M``, ``V``...), its busy time (us) where profiled.
    """

    name: str
    op_type: str
    duration_us: float
    shapes: tuple[tuple[int, ...], ...]
    block_dim: int = 0
    pipes: Mapping[str, float] = field(default_factory=dict)


def read_op_summary(path: str | Path) -> list[ProfiledTask]:
    """The AI-core tasks of an op summary CSV, typed.

    Raises:
        MeasurementError: a missing file, missing columns, or a value that is not a number.
    """
    path = Path(path)
    with _reading(path), path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        details = "Op Name" not in header and "Name" in header
        if details:
            header = [_KERNEL_DETAILS.get(h, h) for h in header]
        missing = [c for c in _REQUIRED if c not in header]
        if missing:
            raise MeasurementError(
                f"'{path}' is not an msprof op_summary CSV: it lacks column(s) "
                f"{', '.join(missing)}"
            )
        tasks = []
        for n, raw in enumerate(reader, start=2):
            r = {k.strip(): (v or "").strip() for k, v in raw.items() if k}
            if details:
                r = {_KERNEL_DETAILS.get(k, k): v for k, v in r.items()}
            if r["Task Type"] in _CORE_TASKS:
                tasks.append(_task(r, f"'{path}' line {n}"))
        return tasks


def _task(r: Mapping[str, str], where: str) -> ProfiledTask:
    """One AI-core row of an op summary (its columns named as msprof's), typed.

    Raises:
        MeasurementError: a value that is not a number, or a duration that is not positive.
    """
    try:
        task = ProfiledTask(
            name=r["Op Name"],
            op_type=r["OP Type"],
            duration_us=float(r["Task Duration(us)"]),
            shapes=_shapes(r["Input Shapes"]),
            block_dim=int(float(r["Block Dim"])) if r.get("Block Dim") else 0,
            pipes={p: float(r[c]) for p, c in _PIPES.items() if r.get(c)},
        )
    except ValueError as err:
        raise MeasurementError(f"{where}: {err}") from None
    if not (math.isfinite(task.duration_us) and task.duration_us > 0):
        raise MeasurementError(
            f"{where}: Task Duration(us) must be a positive number, got {r['Task Duration(us)']!r}"
        )
    return task


def msprof_table(
    csv_path: str | Path,
    model: str,
    target: Target,
    out: str | Path,
    *,
    command: str = "",
    context: str = "in-situ",
) -> dict[str, Any]:
    """Match a profile's rows to the model's ops and write them as a calibration table.

    ``context``: ``in-situ`` (a profile of an application's run: each kernel ran inside the
    step, its activation inputs just written; :func:`situated`) or ``isolated`` (``msprof
    op`` of one op timed alone: a cold L2, the duration as measured).

    Raises:
        MeasurementError: an unreadable CSV, or no row that matches an op of the model.
    """
    tasks = read_op_summary(csv_path)
    graph = load_model_spec(model)
    ctx = FusionContext(graph)
    lowering = Lowering(graph, target)
    by_name = {op.name: op for op in graph.ops if op.name in ctx.index}
    by_shape: dict[tuple[str, tuple[tuple[int, ...], ...]], list[str]] = {}
    for op in by_name.values():
        shapes = tuple(
            tuple(int(d) for d in graph.tensors[t].shape or ())
            for t in op.inputs
            if t and t in graph.tensors
        )
        by_shape.setdefault((op.op_type, shapes), []).append(op.name)
    kernels, costs, skipped, used = [], [], 0, set()
    for r in tasks:
        name = r.name if r.name in by_name and r.name not in used else None
        if name is None:
            key = (CANN_TYPES.get(r.op_type, r.op_type), r.shapes)
            free = [n for n in by_shape.get(key, []) if n not in used]
            name = free[0] if free else None
        if name is None:
            skipped += 1
            continue
        used.add(name)
        group = ctx.group([name])
        try:
            # on the cores the profile names (never more than the chip has), tiled for them
            config = lowering.default(group, block_dim=r.block_dim or None)
        except InfeasibleConfig:
            skipped += 1
            continue
        kernels.append(lowering.kernel(group, config))
        gap_us = target.spec.kernel_gap_s * 1e6  # a task duration excludes the gap before it
        costs.append(KernelCost(r.duration_us + gap_us, measured_pipes(r.pipes)))
    if not kernels:
        raise MeasurementError(
            f"no row of '{csv_path}' matches an op of {model} (by Op Name, or by OP Type and "
            "Input Shapes); was the profile taken on this model?"
        )
    resident, costs = situated(graph, kernels, costs, target, context)
    family = Path(model.removeprefix("zoo:")).stem
    profile = Provenance.of(
        target, measured_by=PROFILE_VERSION, source=f"msprof:{Path(csv_path).name}", family=family
    )
    out = Path(out)
    n = write_table(measurements(kernels, costs, resident, profile), out)
    update_manifest(
        out.parent / "MANIFEST.json",
        out,
        {"rows": n, "target": target.spec.name, "source": str(csv_path), "command": command},
    )
    log.info("msprof: %d rows matched, %d skipped", n, skipped)
    return {"rows": n, "skipped": skipped, "path": str(out), "families": [family]}


def situated(
    graph: Graph,
    kernels: Sequence[Kernel],
    costs: Sequence[KernelCost],
    target: Target,
    context: str,
) -> tuple[list[list[float]], list[KernelCost]]:
    """Each profiled kernel's L2 context and the time its fit row measures. Timed alone: a
    cold L2 and the time as measured. Inside a step: its activation inputs resident as far as
    L2 holds them, and the time less CANN's library prologue inside a step (a vector or mixed
    kernel's: these are CANN's own kernels) plus what its prologue reads saved in L2, so that
    the row measures the generated kernel on the chip's own spec (as
    :mod:`costmodel.measure.real.records` does for a real-data row)."""
    if context not in CONTEXTS:
        raise MeasurementError(f"--context {context!r} is not one of: {', '.join(CONTEXTS)}")
    if context == "isolated":
        return [[0.0] * sum(1 for s in k.streams if s.is_load) for k in kernels], list(costs)
    spec = target.spec
    model = AnalyticModel(target)
    inside = spec.in_situ()
    shift = spec.in_situ_saving_us
    resident, fitted = [], []
    for kernel, cost in zip(kernels, costs, strict=True):
        ops = [graph.op(n) for n in kernel.ops]
        made = {t for op in ops for t in op.outputs}
        acts = [
            t
            for op in ops
            for t in op.inputs
            if t and t not in made and graph.tensors[t].kind in ("input", "intermediate")
        ]
        resident.append(model.residency([kernel], warm=written_tensors(graph, acts, target))[0])
        library = inside.library().library_prologue_us if kernel.unit != "cube" else 0.0
        fitted.append(dataclasses.replace(cost, latency_us=cost.latency_us - library + shift))
    return resident, fitted


def hardware_table(
    csv_path: str | Path,
    model: str | None,
    target: Target,
    out: str | Path,
    *,
    command: str = "",
    context: str = "in-situ",
) -> dict[str, Any]:
    """A calibration table of measurements on hardware: a real-data CSV (each row its own
    kernel and context; ``model`` unused), or an msprof op summary / kernel_details CSV of
    ``model`` (``context``: where its kernels ran, :func:`msprof_table`).

    Raises:
        MeasurementError: an unreadable CSV, a profile without ``model``, or no usable row.
    """
    if not is_real_csv(csv_header(csv_path)):
        if model is None:
            raise MeasurementError(
                "--from-msprof needs --model (the ONNX model the profile ran) for a profile; "
                "a real-data CSV (datasets/real/) needs none"
            )
        return msprof_table(csv_path, model, target, out, command=command, context=context)
    from costmodel.measure.real.records import real_measurements
    from costmodel.measure.real.rows import read_real

    rows, problems = read_real([str(csv_path)])
    table, left_out = real_measurements(rows, target.spec.name)
    lines = [*(str(p) for p in problems), *left_out]
    if not table:
        raise MeasurementError(
            f"no row of '{csv_path}' is a device time of one kernel on {target.spec.name} or a "
            f"SKU of it ({len(lines)} left out; first: {lines[0] if lines else '-'})"
        )
    out = Path(out)
    n = write_table(table, out)
    update_manifest(
        out.parent / "MANIFEST.json",
        out,
        {"rows": n, "target": target.spec.name, "source": str(csv_path), "command": command},
    )
    return {
        "rows": n,
        "skipped": len(lines),
        "problems": lines,
        "path": str(out),
        "families": sorted({m.provenance.family for m in table}),
        "sources": sorted({m.provenance.source for m in table}),
    }
