"""Real measured kernel times as rows: one CSV row per timing published by someone who ran the
kernel on an Ascend NPU (``datasets/real/``).

Columns (the format of the public collections; extra columns are kept, missing optional ones
are inferred): ``chip``, ``op``, ``shapes``, ``dtype``, ``time_us``, ``timing``, ``throughput``,
``block_dim``, ``source``, ``quote``, ``notes``.

* ``op`` names the operator as its source does (``RmsNorm``, ``MatMul (linear, y=x@W^T)``,
  ``Addmv (torch.addmv: y=b+A@x)``, ``ReduceSum``...); :func:`family_of` maps it to a family.
* ``shapes`` names each input with its dims: ``x=[128,512], W=[512,512]``; names joined by
  ``=`` share dims (``q=k=v=[1,32,128,128]``); whatever follows ``->`` (the outputs) and
  annotations in parentheses are ignored. Dims may be products or carry K/M/G suffixes
  (``[64*1024*1024]``, ``[64M]``). Bare shapes and op dims (``M=, N=, K=``) are read too
  (:mod:`costmodel.measure.real.shapes`).
* ``timing`` is ``device`` (msprof task duration: the kernel alone on the device) or ``host``
  (wall clock or ``do_bench``: launch included). Without the column it is read from the notes.
* ``impl`` (optional) is ``library`` (CANN's own op kernel, what ``torch_npu`` and ``aclnn``
  call: the default, as public timings mostly are) or ``custom`` (a kernel written or
  compiled for the shape: Ascend C, PyAsc, TileLang; what this tool generates).
* ``vec_us``, ``mte2_us``, ``mte3_us``, ``mte1_us``, ``mac_us``, ``fixpipe_us`` (optional) are
  the kernel's per-pipe busy times as msprof reports them (a pipeline detail, or a
  ``PipeUtilization`` share times each core's own run time): the mean over the cores that
  ran, in us, never longer than the kernel; 0 is an idle pipe. A fit takes the cube's pipes'
  (:data:`~costmodel.measure.MEASURED_PIPES`); ``scalar_us`` is kept as read.

* ``context`` (optional) is ``isolated`` (the default: the kernel timed alone, replayed on
  its buffers, as microbenchmarks and ``msprof op`` run it) or ``in-situ`` (the kernel inside
  a real training or serving step, whose inputs the kernels before it just wrote: they are
  in L2 as far as it holds them, :mod:`costmodel.residency`).

* ``block_dim`` (optional): the cores the kernel ran on, where the cell states one number for
  the row; a range or a number under a condition leaves the row its default config's cores.

A row that cannot be read (an unknown op, a shape that does not parse, a missing time) is
reported by its row number and skipped; it never stops the others.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from costmodel.exceptions import MeasurementError
from costmodel.lower.attention import CAUSAL_SKIP, VEC_ROWS
from costmodel.measure.real.families import FAMILIES, family_of
from costmodel.measure.real.shapes import parse_dims, parse_tensors

__all__ = [
    "ATTENTION_KNOBS",
    "BUSY_COLUMNS",
    "FAMILIES",
    "RealRow",
    "RowProblem",
    "family_of",
    "parse_dims",
    "parse_row",
    "parse_tensors",
    "read_real",
    "source_name",
    "target_of",
    "tiling_of",
]

CHIPS = {
    "910b1": "ascend910b1",
    "910b2": "ascend910b2",
    "910b3": "ascend910b3",
    "910b4": "ascend910b4",
    "910b": "ascend910b",
    "910": "ascend910",
    "310p": "ascend310p",
}
DTYPES = {
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "hf32": "float32",
    "int32": "int32",
    "int64": "int64",
}
IMPLS = ("library", "custom")
# device: msprof task duration (the kernel alone); host: a clock around the launch (do_bench,
# NPU events around a loop); unstated: the source does not say (scored apart, never fitted)
TIMINGS = ("device", "host", "unstated")
CONTEXTS = ("isolated", "in-situ")
# optional per-pipe busy columns -> the cost models' pipe names
BUSY_COLUMNS = {
    "vec_us": "V",
    "mte2_us": "MTE2",
    "mte3_us": "MTE3",
    "mte1_us": "MTE1",
    "mac_us": "M",
    "fixpipe_us": "FIX",
}
DEVICE_WORDS = ("msprof", "task duration", "kernel_details", "kernel-only", "device time")
HOST_WORDS = ("do_bench", "wall", "time.time", "perf_counter", "host", "synchronize", "e2e")


@dataclass(frozen=True)
class RealRow:
    """One real timing: what ran, on which chip, how long it took and how that was timed.

    Attributes:
        row: the row's number in its file (1 = the first row after the header).
        path: the file it came from.
        chip: the chip as the source names it; ``target`` is the spec it maps to.
        op: the op column as written; ``family`` is what :func:`family_of` made of it.
        tensors: input name -> dims, in the order the shapes column names them (``shapes``:
            the column as written).
        dtype: numpy-style dtype name of the data (``float16``, ``bfloat16``, ``float32``).
        time_us: the measured time.
        timing: ``device`` or ``host``.
        source, quote, notes: provenance, as written.
        impl: ``library`` (a CANN op kernel) or ``custom`` (a kernel written for the shape).
        context: ``isolated`` (timed alone) or ``in-situ`` (inside a real step: its inputs
            just written by the kernels before it).
        tiling: the tile config the row names, where it names one (:func:`tiling_of`).
        pipes: measured busy time (us) per pipe (``V``, ``MTE2``...), where the row has them.
    """

    row: int
    path: str
    chip: str
    target: str
    op: str
    family: str
    tensors: Mapping[str, tuple[int, ...]]
    dtype: str
    time_us: float
    timing: str
    source: str = ""
    quote: str = ""
    notes: str = ""
    block_dim: int | None = None
    impl: str = "library"
    context: str = "isolated"
    shapes: str = ""
    tiling: Mapping[str, int] = field(default_factory=dict)
    extra: Mapping[str, str] = field(default_factory=dict)
    pipes: Mapping[str, float] = field(default_factory=dict)

    @property
    def source_name(self) -> str:
        """The source without its commit and path (:func:`source_name`)."""
        return source_name(self.source)


@dataclass(frozen=True)
class RowProblem:
    """A row that was skipped, and why (one line)."""

    row: int
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path} row {self.row}: {self.reason}; skipped"


def target_of(chip: str) -> str:
    """The spec name of a chip column (``910B4`` -> ``ascend910b4``; a 910B of no stated SKU
    -> ``ascend910b``, the 910B2, or the 910B3 where it states 20 cube cores).

    Raises:
        MeasurementError: a chip this tool has no spec for.
    """
    text = chip.lower().replace("ascend", "").replace(" ", "")
    # Atlas 800T/800I/900 A2: a 910B of no stated SKU; an A3 (910_93) die is a 910B's
    if re.search(r"atlas\w*a2|^a[23]\b|910_93", text):
        return CHIPS["910b"]
    m = re.search(r"(910b[1-4]?|910|310p)", text)
    if m is None:
        raise MeasurementError(f"unknown chip {chip!r}; known: {', '.join(sorted(CHIPS))}")
    cores = re.search(r"(\d+)aic", text)  # the first count stated: a remark may name others
    if m.group(1) == "910b" and cores is not None and cores.group(1) == "20":
        return CHIPS["910b3"]
    return CHIPS[m.group(1)]


def _timing(row: Mapping[str, str]) -> str:
    """``device``, ``host`` or ``unstated``: the cell's first word (``host-event``, NPU events
    around a loop, is a host timing: the launch gaps are inside), else read from the notes."""
    given = (row.get("timing") or "").strip().lower()
    if given:
        word = re.match(r"[a-z]+", given)
        timing = word.group(0) if word else given
        if timing not in TIMINGS:
            raise MeasurementError(f"timing {given!r} must be 'device', 'host' or 'unstated'")
        return timing
    text = " ".join(row.get(k, "") or "" for k in ("notes", "quote")).lower()
    device = any(w in text for w in DEVICE_WORDS)
    host = any(w in text for w in HOST_WORDS)
    return "host" if host and not device else "device"


def _dtype(text: str) -> str | None:
    """The data's dtype: the cell's first word (the first input's, of msprof's ``FLOAT;FLOAT``;
    ``DT_BF16`` as ``bf16``). A cell that says the dtype is ``unstated`` reads as the dtype it
    names after that (``unstated (bf16 model)``), else as float32, torch's default."""
    cell = text.strip().lower().removeprefix("dt_")
    lead = re.match(r"[a-z0-9]+", cell)
    word = lead.group(0) if lead else ""
    if word == "unstated":
        named = [DTYPES[w] for w in re.findall(r"[a-z0-9]+", cell) if w in DTYPES]
        return named[0] if named else "float32"
    return DTYPES.get(word)


_LEVEL = re.compile(r"\b(L[01])(?:TileShape)?\s*<\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*>")
_TRITON = re.compile(r"triton\.Config\(\s*\{([^}]*)\}")
# a flash attention's knobs a tiling cell may state (its query block is ``q_tile``)
ATTENTION_KNOBS = ("kv_tile", VEC_ROWS, CAUSAL_SKIP)
_FLASH = re.compile(rf"\b(q_tile|{'|'.join(ATTENTION_KNOBS)})\s*=\s*(\d+)")


def tiling_of(text: str) -> dict[str, int]:
    """The tile config a row's text names: a GEMM template's L1 and L0 tiles (catlass's
    ``L1<128,256,256> L0<128,256,64>``: M, N, K of each) as ``base_m``.. and ``m``..; a
    flash attention's ``q_tile=128 kv_tile=256 vec_rows=32 causal_skip=0`` (query block as
    ``base_m``, key step, rows a vector core softmaxes at a time, whether it skips masked
    key blocks); a Triton config's keyword values as
    written (``BLOCK_SIZE_M``...); empty for none."""
    out: dict[str, int] = {}
    for key, value in _FLASH.findall(text):
        out["base_m" if key == "q_tile" else key] = int(value)
    for level, *dims in _LEVEL.findall(text):
        keys = ("base_m", "base_n", "base_k") if level == "L1" else ("m", "n", "k")
        out.update(zip(keys, map(int, dims), strict=True))
    m = _TRITON.search(text)
    if m:
        for key, value in re.findall(r"'(\w+)'\s*:\s*(\d+)", m.group(1)):
            out[key] = int(value)
    return out


def _context(text: str) -> str:
    context = re.sub(r"[\s_]+", "-", (text or "").strip().lower()) or "isolated"
    context = {"insitu": "in-situ", "alone": "isolated"}.get(context, context)
    if context not in CONTEXTS:
        raise MeasurementError(f"context {text!r} must be 'isolated' or 'in-situ'")
    return context


def _impl(text: str) -> str:
    impl = (text or "").strip().lower() or "library"
    if impl not in IMPLS:
        raise MeasurementError(f"impl {text!r} must be 'library' or 'custom'")
    return impl


_CORES = r"(?:(?:ai[vc]s?|ai|vector|cube)\s*)?(?:cores?|blocks?)|ai[vc]s?"
_PLAIN_BLOCK_DIM = re.compile(rf"([0-9]+)(?:\.0*)?\s*(?:{_CORES})?", re.IGNORECASE)


def _block_dim(text: str) -> int | None:
    """The cores the kernel ran on, where the cell states one number for the row: ``40``,
    ``40.0``, ``40 AIV``, ``40 AIV cores``, ``40 AIV (per README)``. A range (``32-40 AIV``) or
    a number under a condition (``6 AIV for small shapes``) does not say which applies to this
    row, and the row is costed on the cores its default config takes. The rule is lexical:
    text in parentheses is a remark and is not read."""
    plain = re.sub(r"\([^()]*(?:\([^()]*\)[^()]*)*\)", " ", text or "").strip()
    m = _PLAIN_BLOCK_DIM.fullmatch(plain)
    return int(m.group(1)) if m else None


def _pipes(row: Mapping[str, str], time_us: float) -> dict[str, float]:
    pipes: dict[str, float] = {}
    for column, pipe in BUSY_COLUMNS.items():
        text = (row.get(column) or "").strip()
        if not text:
            continue
        try:
            busy = float(text)
        except ValueError:
            raise MeasurementError(
                f"{column} {text!r} is not a number (give the pipe's busy time in us, or leave "
                "it empty)"
            ) from None
        if not (math.isfinite(busy) and 0 <= busy <= time_us * 1.001):  # rounding: 0.1%
            raise MeasurementError(
                f"{column} must be a busy time between 0 and the kernel's time_us ({time_us}), "
                f"but got {text!r}"
            )
        if busy > 0:  # an idle pipe (0) is not a measurement of its rate
            pipes[pipe] = busy
    return pipes


def parse_row(number: int, path: str, row: Mapping[str, str]) -> RealRow:
    """One CSV row as a :class:`RealRow`.

    Raises:
        MeasurementError: a field that cannot be read (the message names it).
    """
    op = (row.get("op") or "").strip()
    if not op:
        raise MeasurementError("no op")
    dtype = _dtype(row.get("dtype") or "")
    if dtype is None:
        raise MeasurementError(
            f"unknown dtype {row.get('dtype')!r}; known: fp16, bf16, fp32, int32, int64"
        )
    try:
        time_us = float(row.get("time_us") or "nan")
    except ValueError:
        raise MeasurementError(f"time_us {row.get('time_us')!r} is not a number") from None
    if not math.isfinite(time_us) or time_us <= 0:
        raise MeasurementError(
            f"time_us must be a positive number, but got {row.get('time_us')!r}"
        )
    chip = (row.get("chip") or "").strip()
    family = family_of(op)
    known = {"chip", "op", "shapes", "dtype", "time_us", "timing", "block_dim", "source"}
    known |= {"impl", "context", "tiling"}
    known |= set(BUSY_COLUMNS)
    return RealRow(
        row=number,
        path=path,
        chip=chip,
        target=target_of(chip),
        op=op,
        family=family,
        tensors=parse_tensors(row.get("shapes") or "", family),
        dtype=dtype,
        time_us=time_us,
        timing=_timing(row),
        source=(row.get("source") or "").strip(),
        quote=(row.get("quote") or "").strip(),
        notes=(row.get("notes") or "").strip(),
        block_dim=_block_dim(row.get("block_dim") or ""),
        impl=_impl(row.get("impl") or ""),
        context=_context(row.get("context") or ""),
        shapes=(row.get("shapes") or "").strip(),
        tiling=tiling_of(f"{row.get('shapes') or ''} {op} {row.get('tiling') or ''}"),
        extra={k: v for k, v in row.items() if k and k not in known and v},
        pipes=_pipes(row, time_us),
    )


def read_real(paths: Iterable[str | Path]) -> tuple[list[RealRow], list[RowProblem]]:
    """Every readable row of the CSV files, and the rows skipped with why.

    Raises:
        MeasurementError: a file that cannot be read, or has no ``op``/``shapes``/``time_us``
            column.
    """
    rows: list[RealRow] = []
    problems: list[RowProblem] = []
    for p in paths:
        path = Path(p)
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                missing = {"op", "shapes", "time_us"} - set(reader.fieldnames or ())
                if missing:
                    raise MeasurementError(
                        f"'{path}' has no {', '.join(sorted(missing))} column; real-data CSVs "
                        "have chip,op,shapes,dtype,time_us,timing,source,quote"
                    )
                records = list(reader)
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            raise MeasurementError(f"cannot read real-data file '{path}': {err}") from None
        for number, record in enumerate(records, start=1):
            try:
                rows.append(parse_row(number, str(path), record))
            except MeasurementError as err:
                problems.append(RowProblem(number, str(path), str(err)))
    return rows, problems


def tensor_list(row: RealRow) -> Sequence[tuple[str, tuple[int, ...]]]:
    """The row's inputs as (name, dims) pairs in order."""
    return list(row.tensors.items())


def source_name(source: str) -> str:
    """A source cell without its commit and path: ``owner/repo`` of a GitHub source (written
    ``github:owner/repo@commit:path``, ``owner/repo@commit:path`` or as a URL), else a URL's
    site."""
    s = source.strip()
    if s.startswith("github:"):
        return s.split("@")[0].split(":")[1] if ":" in s[7:] else s.split("@")[0]
    m = re.match(r"https?://(?:www\.)?github\.com/([^/]+/[^/]+)", s)
    if m:
        return m.group(1)
    m = re.match(r"([\w.-]+/[\w.-]+)@", s)  # owner/repo@commit:path
    if m:
        return m.group(1)
    m = re.match(r"https?://([^/]+)", s)
    return m.group(1) if m else (s or "unknown")
