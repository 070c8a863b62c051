"""What kind of file a path holds, told by its content (its magic bytes, its structure), not
by its name: an output may replace a file of its own kind only (:func:`search_space.atomic.
output_path`), so ``report --html autotune.journal`` never writes a page over a study.

Kinds (:data:`KINDS`): ``onnx`` (``tool_onnx``: one this tool wrote, which ``apply -o`` and
``zoo export -o`` may replace), ``journal``, ``plan``, ``cost_model``, ``json``, ``html``,
``parquet``, ``sqlite``, ``zip``, ``gzip``, ``toml``, ``text``, ``data``. An empty or missing
file has no kind (nothing to lose).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

__all__ = ["KINDS", "TOOL_PRODUCER", "file_kind"]

KINDS = {
    "onnx": "an ONNX model",
    "tool_onnx": "an ONNX model this tool wrote",
    "journal": "an Optuna journal (a study's storage)",
    "plan": "a fusion plan",
    "cost_model": "a saved cost model",
    "json": "a JSON file",
    "html": "an HTML page",
    "parquet": "a Parquet table",
    "sqlite": "an SQLite database (a study's storage?)",
    "zip": "a zip archive (.npz)",
    "gzip": "a gzip-compressed file",
    "toml": "a TOML file (a config or a target spec)",
    "text": "a text file",
    "data": "a file of data this tool does not write",
}
_MAGIC = {
    b"PAR1": "parquet",
    b"SQLite format 3\x00": "sqlite",
    b"PK\x03\x04": "zip",
    b"PK\x05\x06": "zip",
    b"\x1f\x8b": "gzip",
}
TOOL_PRODUCER = "autotune"  # the producer_name of the models this tool writes starts so
_HEAD = 1 << 16  # bytes read to tell a kind
_WHOLE = 64 << 20  # JSON and TOML files up to this size are parsed whole
# ModelProto's fields (onnx.proto): number -> wire type (0 varint, 2 length-delimited)
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}


def file_kind(path: str | os.PathLike[str]) -> str | None:
    """The kind of the regular file at ``path`` (a key of :data:`KINDS`); None when it is
    missing, empty or not a regular file."""
    p = Path(path)
    try:
        if not p.is_file() or p.stat().st_size == 0:
            return None
        with p.open("rb") as fh:
            head = fh.read(_HEAD)
        size = p.stat().st_size
    except OSError:
        return None
    for magic, kind in _MAGIC.items():
        if head.startswith(magic):
            return kind
    producer = _onnx_producer(head)
    if producer is not None:
        return "tool_onnx" if producer.startswith(TOOL_PRODUCER) else "onnx"
    return _text_kind(p, head, size)


def _text_kind(p: Path, head: bytes, size: int) -> str:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not a character cut at the end of the head
            return "data"
        text = head[: exc.start].decode("utf-8")
    if "\x00" in text:
        return "data"
    start = text.lstrip("\ufeff \t\r\n")[:15].lower()
    if start.startswith(("<!doctype html", "<html")):
        return "html"
    if start.startswith("{"):
        return _json_kind(p, text, size)
    if size <= _WHOLE and _is_toml(p):
        return "toml"
    return "text"


def _json_kind(p: Path, head: str, size: int) -> str:
    first = head.split("\n", 1)[0]
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    if isinstance(record, dict) and "op_code" in record:
        return "journal"
    doc = record
    if size <= _WHOLE and (doc is None or "\n" in head.strip()):
        try:
            doc = json.loads(p.read_bytes())
        except (OSError, ValueError):
            doc = None
    if isinstance(doc, dict) and "groups" in doc and "fingerprint" in doc:
        return "plan"
    if isinstance(doc, dict) and {"kind", "target", "state"} <= doc.keys():
        return "cost_model"
    return "json" if doc is not None else "text"


def _is_toml(p: Path) -> bool:
    try:
        return bool(tomllib.loads(p.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return False


def _onnx_producer(head: bytes) -> str | None:
    """The ``producer_name`` of a serialized ``onnx.ModelProto`` that ``head`` starts (empty
    when it has none); None when ``head`` does not start one: an ``ir_version`` among
    ModelProto's own fields, each of the right wire type and length."""
    i, seen, producer = 0, set[int](), b""
    while i < len(head) and not seen & {7, 8} and len(seen) < len(_MODEL_FIELDS):
        tag, i = _varint(head, i)
        if tag is None:
            return None
        field, wire = tag >> 3, tag & 7
        if _MODEL_FIELDS.get(field) != wire:
            return None
        value, i = _varint(head, i)
        if value is None or (field == 1 and not 1 <= value <= 64):
            return None
        seen.add(field)
        if wire == 2:
            if field != 7 and i + value > len(head):
                return None
            producer = head[i : i + value] if field == 2 else producer
            i += value
    if 1 not in seen or not seen & {7, 8}:
        return None
    return producer.decode("utf-8", "replace")


def _varint(data: bytes, i: int) -> tuple[int | None, int]:
    value, shift = 0, 0
    while i < len(data) and shift < 64:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7
    return None, i
