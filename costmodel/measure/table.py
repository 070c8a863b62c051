"""Calibration tables: one row per kernel run on the simulator (or on a real NPU), as parquet.

A row is one :class:`~costmodel.measure.record.Measurement` in plain columns: everything
needed to re-score the kernel with any analytic constants (the lowered :class:`Kernel` as JSON
plus the L2 residency it ran with), the measured latency and per-pipe busy times, and
provenance (target, spec hash, simulator version, seed, source). Records are written
atomically (:func:`write_table`); a table is read back only through :func:`read_table`, which
checks its columns (parquet holds plain columns: nothing in it is unpickled), and its rows
are records again through :func:`measurements_of`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costmodel.base import KernelCost
from costmodel.exceptions import CostModelError
from costmodel.kernel import PIPES, Kernel, Stream
from costmodel.measure.record import Measurement, Provenance, measured_cost
from search_space.atomic import atomic_write_bytes, atomic_write_text
from search_space.ir import KernelConfig

__all__ = [
    "MEASURED_PIPES",
    "PIPE_COLUMNS",
    "REQUIRED_COLUMNS",
    "kernel_from_json",
    "kernel_to_json",
    "measured_pipes",
    "measurements_of",
    "merge_table",
    "read_table",
    "row_key",
    "table_frame",
    "target_tables",
    "update_manifest",
    "write_table",
]

TABLE_SCHEMA = 1
PIPE_COLUMNS = tuple(f"pipe_{p}_us" for p in PIPES)
# Pipes whose busy times msprof and the models count alike: the cube's (MTE1, M). A model's
# DMA pipe (MTE2, FIX, MTE3) is busy while its bytes move; msprof's counts each transfer from
# issue to completion, its latency too (PyAsc's RMSNorm on a 910B4 spends 0.45 us of MTE2 and
# 0.17 us of MTE3 on 3 KB per core, ~0.07 us of data each). A model's vector pipe also holds
# each loop iteration's scalar bookkeeping (``scalar_iter_cycles``: its instructions wait for
# it), which msprof counts as Scalar. Fitted together, either would be read as a wrong rate.
MEASURED_PIPES = ("MTE1", "M")


def measured_pipes(pipes: Mapping[str, float]) -> dict[str, float]:
    """The busy times of a hardware measurement a fit can compare with a model's
    (:data:`MEASURED_PIPES`); the DMA and vector pipes' are left out."""
    return {p: float(v) for p, v in pipes.items() if p in MEASURED_PIPES}


REQUIRED_COLUMNS = (
    "schema_version",
    "target",
    "spec_digest",
    "precision",
    "simulator_version",
    "seed",
    "source",
    "family",
    "group_id",
    "signature",
    "kind",
    "unit",
    "config",
    "kernel",
    "resident",
    "latency_us",
    *PIPE_COLUMNS,
)

# a stream as one row of a kernel record; rows written before ``reread`` have the first 9,
# before ``packed`` the first 10
_STREAM_FIELDS = (
    "tensor",
    "pipe",
    "bytes",
    "key",
    "per",
    "side",
    "nd2nz",
    "tensor_bytes",
    "row_bytes",
    "reread",
    "packed",
)
_KERNEL_SCALARS = (
    "name",
    "kind",
    "unit",
    "steps",
    "mte1_l0a_bytes",
    "mte1_l0b_bytes",
    "mmads",
    "cube_cycles",
    "vector_cycles_step",
    "vector_cycles_tile",
    "vector_instrs",
    "cross_core_syncs",
    "flops",
    "cube_flops",
    "compulsory_bytes",
    "signature",
)


def kernel_to_json(kernel: Kernel) -> dict[str, Any]:
    """A lowered kernel as plain JSON values (streams as rows of :data:`_STREAM_FIELDS`)."""
    out: dict[str, Any] = {k: getattr(kernel, k) for k in _KERNEL_SCALARS}
    out["ops"] = list(kernel.ops)
    out["grid"] = list(kernel.grid)
    out["config"] = kernel.config.to_json()
    out["footprint"] = dict(kernel.footprint)
    out["streams"] = [[getattr(s, f) for f in _STREAM_FIELDS] for s in kernel.streams]
    return out


def kernel_from_json(data: Mapping[str, Any]) -> Kernel:
    """Rebuild what :func:`kernel_to_json` wrote.

    Raises:
        CostModelError: a field is missing or of the wrong type.
    """
    try:
        streams = tuple(
            Stream(
                tensor=str(s[0]),
                pipe=str(s[1]),
                bytes=int(s[2]),
                key=str(s[3]),
                per=str(s[4]),
                side=str(s[5]),
                nd2nz=bool(s[6]),
                tensor_bytes=int(s[7]),
                row_bytes=int(s[8]),
                reread=float(s[9]) if len(s) > 9 else 0.0,
                packed=bool(s[10]) if len(s) > 10 else False,
            )
            for s in data["streams"]
        )
        ints: dict[str, Any] = {k: int(data[k]) for k in _KERNEL_SCALARS if k not in _NON_INT}
        floats: dict[str, Any] = {k: float(data[k]) for k in _FLOATS}
        b, i, j = (int(g) for g in data["grid"])
        grid = (b, i, j)
        return Kernel(
            name=str(data["name"]),
            ops=tuple(str(o) for o in data["ops"]),
            kind=str(data["kind"]),
            unit=str(data["unit"]),
            config=KernelConfig.from_json(data["config"]),
            grid=grid,
            streams=streams,
            footprint={str(k): int(v) for k, v in dict(data["footprint"]).items()},
            signature=str(data["signature"]),
            **ints,
            **floats,
        )
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise CostModelError(f"malformed kernel record: {err!r}") from None


_FLOATS = ("cube_cycles", "vector_cycles_step", "vector_cycles_tile")
_NON_INT = frozenset({"name", "kind", "unit", "signature", *_FLOATS})


def _resident_text(resident: Sequence[float]) -> str:
    return json.dumps([round(float(r), 6) for r in resident])


def row_key(m: Measurement) -> str:
    """A record's kernel and L2 context as its row writes them: rows that hold the same key
    measure the same kernel in the same context."""
    kernel = json.dumps(kernel_to_json(m.kernel), separators=(",", ":"))
    return kernel + _resident_text(m.resident)


def _row(m: Measurement) -> dict[str, Any]:
    """One record as a table row (:data:`REQUIRED_COLUMNS`)."""
    k, c, p = m.kernel, m.cost, m.provenance
    row: dict[str, Any] = {
        "schema_version": TABLE_SCHEMA,
        "target": p.target,
        "spec_digest": p.spec_digest,
        "precision": p.precision,
        "simulator_version": p.measured_by,
        "seed": int(p.seed),
        "source": p.source,
        "family": p.family,
        "group_id": m.group_id,
        "signature": k.signature,
        "kind": k.kind,
        "unit": k.unit,
        "config": json.dumps(k.config.to_json(), sort_keys=True),
        "kernel": json.dumps(kernel_to_json(k), separators=(",", ":")),
        "resident": _resident_text(m.resident),
        "latency_us": float(c.latency_us),
    }
    for pipe, col in zip(PIPES, PIPE_COLUMNS, strict=True):
        row[col] = float(c.pipes_us.get(pipe, 0.0))
    return row


def table_frame(records: Iterable[Measurement]) -> pd.DataFrame:
    """Records as a table's columns, one row each (what :func:`write_table` writes)."""
    return pd.DataFrame([_row(m) for m in records])


def measurements_of(frame: pd.DataFrame) -> list[Measurement]:
    """The records of a table's rows (a frame :func:`read_table` returned): each kernel
    rebuilt from its JSON, the cost from the latency and pipe columns.

    Raises:
        CostModelError: a kernel or L2 context that does not parse.
    """
    out = []
    for row in frame.to_dict("records"):
        provenance = Provenance(
            target=str(row["target"]),
            spec_digest=str(row["spec_digest"]),
            precision=str(row["precision"]),
            measured_by=str(row["simulator_version"]),
            seed=int(row["seed"]),
            source=str(row["source"]),
            family=str(row["family"]),
        )
        try:
            kernel = json.loads(row["kernel"])
            resident = tuple(float(r) for r in json.loads(row["resident"]))
        except (TypeError, ValueError) as err:
            raise CostModelError(f"malformed table row: {err!r}") from None
        pipes = {p: row[col] for p, col in zip(PIPES, PIPE_COLUMNS, strict=True)}
        cost = measured_cost(KernelCost(row["latency_us"], pipes))
        m = Measurement(kernel_from_json(kernel), cost, resident, provenance, str(row["group_id"]))
        out.append(m)
    return out


def write_table(records: Iterable[Measurement], path: str | Path) -> int:
    """Write records as a zstd-compressed parquet table, atomically; returns the row count.

    Raises:
        CostModelError: no records.
    """
    return _write_frame(table_frame(records), path)


def _write_frame(frame: pd.DataFrame, path: str | Path) -> int:
    if frame.empty:
        raise CostModelError("no rows to write")
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise CostModelError(f"rows lack column(s) {missing}")
    buf = io.BytesIO()
    frame.to_parquet(buf, compression="zstd", index=False)
    atomic_write_bytes(path, buf.getvalue())
    return len(frame)


def merge_table(records: Sequence[Measurement], path: str | Path) -> int:
    """Write records into the table at ``path``, atomically, keeping every row already there
    (a table that cannot be read is replaced): a record is added unless a row of the same
    source already holds its kernel in its L2 context (:func:`row_key`). Returns the rows
    written.

    Raises:
        CostModelError: no records and no table.
    """
    kept: list[dict[str, Any]] = []
    if Path(path).is_file():
        try:
            kept = read_table(path).to_dict("records")
        except CostModelError:
            kept = []
    seen = {r["kernel"] + r["resident"] + r["source"] for r in kept}
    fresh = [_row(m) for m in records if row_key(m) + m.provenance.source not in seen]
    return _write_frame(pd.DataFrame(kept + fresh), path)


def target_tables(target: str, folder: str | Path) -> list[Path]:
    """A target's tables in ``folder``: ``<target>.parquet`` and ``<target>-<part>.parquet``
    (its hardware table ``<target>-real.parquet`` among them), never another target's whose
    name starts alike (``ascend910b.parquet`` is not ``ascend910``'s)."""
    folder, stem = Path(folder), Path(target).stem
    if not folder.is_dir():
        return []
    return sorted([*folder.glob(f"{stem}.parquet"), *folder.glob(f"{stem}-*.parquet")])


def read_table(paths: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """Read one or more calibration tables into one frame.

    Raises:
        CostModelError: a missing or unreadable file, or a table without the required columns.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    frames = []
    for p in paths:
        try:
            frame = pd.read_parquet(p)
        except OSError as err:
            raise CostModelError(
                f"cannot read calibration table '{p}': {str(err).splitlines()[0]}"
            ) from None
        except Exception as err:  # pyarrow's own errors for a file that is not parquet
            raise CostModelError(
                f"'{p}' is not a parquet calibration table ({type(err).__name__}); "
                "make one with `autotune calibrate`"
            ) from None
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            raise CostModelError(
                f"'{p}' is not a calibration table: it lacks column(s) {', '.join(missing)}"
            )
        bad = frame["schema_version"].astype(int) > TABLE_SCHEMA
        if bad.any():
            raise CostModelError(
                f"'{p}' was written by a newer tool (table schema > {TABLE_SCHEMA}); upgrade"
            )
        frames.append(frame)
    if not frames:
        raise CostModelError("no calibration tables given")
    out = pd.concat(frames, ignore_index=True)
    lat = out["latency_us"].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(lat) & (lat > 0)):
        raise CostModelError("calibration table has non-positive or non-finite latencies")
    return out


def update_manifest(path: str | Path, table: str | Path, entry: Mapping[str, Any]) -> None:
    """Add or replace ``table``'s entry in a MANIFEST.json (size, sha256, rows, how made)."""
    path, table = Path(path), Path(table)
    try:
        doc = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        doc = {}
    tables = [t for t in doc.get("tables", []) if t.get("file") != table.name]
    data = table.read_bytes()
    tables.append(
        {
            "file": table.name,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "created": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **entry,
        }
    )
    doc = {
        "about": "Calibration tables: one row per kernel run on the simulator. Regenerate "
        "any table with the command recorded in its entry.",
        "tables": sorted(tables, key=lambda t: t["file"]),
    }
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
