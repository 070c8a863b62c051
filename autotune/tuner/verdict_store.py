"""Safe mode's verdicts kept across studies of the same model (issue 46, item 3).

A kernel's verdict depends on its signature, the part of its config its arithmetic reads
(:func:`~autotune.verify.numerics.numerics_key`), the model's values, the target and its
precision, the policy's thresholds and the checks' own code; nothing else. A study keeps the
verdicts it reaches in a JSON file beside its storage (``<journal>.verdicts.json``, or
``autotune.verdicts.json`` for a database URL), under a *scope*: a digest of everything but
the signature and the key. The next study of the same model, target and thresholds (a
resumed one, a ``--new`` one, another trial count) starts from them instead of checking every
kernel again; a different model or threshold has another scope and shares nothing.

The file is a cache: unreadable or of another schema, it is ignored (with a warning) and
written anew; several workers writing it merge what they know, and a lost race loses
verdicts, never correctness. Nothing in it is executed or unpickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import onnx

from autotune.verify import KernelVerdict
from autotune.verify.check import Status
from costmodel.spec import Target
from search_space.atomic import atomic_write_text
from search_space.ir import Graph
from search_space.rules import Policy

__all__ = ["CHECKS_VERSION", "keep", "kept", "load", "scope", "store_path"]

log = logging.getLogger(__name__)
SCHEMA = "autotune.verdicts/1"
# bump when autotune.verify changes what a verdict says: older verdicts then go unused
CHECKS_VERSION = 1
THRESHOLDS = ("cosine_min", "max_abs_err", "max_rel_err", "error_factor", "outlier_scale")
Known = MutableMapping[tuple[str, Any], KernelVerdict]


def store_path(storage_name: str) -> Path:
    """Where a study on ``storage_name`` keeps its verdicts: beside a journal file, else
    ``autotune.verdicts.json`` in the working folder."""
    if "://" in storage_name:
        return Path("autotune.verdicts.json")
    return Path(storage_name).with_suffix(".verdicts.json")


def scope(model: onnx.ModelProto, graph: Graph, target: Target, policy: Policy) -> str:
    """The digest of what a verdict depends on besides its kernel: the model's values (every
    initializer), its graph, the target and precision, the thresholds and the checks'
    version."""
    h = hashlib.sha256()
    for part in (
        str(CHECKS_VERSION),
        graph.fingerprint(),
        target.spec.digest(),
        str(target.precision),
        json.dumps([getattr(policy, k) for k in THRESHOLDS]),
    ):
        h.update(part.encode() + b"\0")
    for init in model.graph.initializer:
        h.update(init.SerializeToString())
    return h.hexdigest()[:32]


def _key(key: tuple[str, Any]) -> str:
    sig, numerics = key
    return json.dumps([sig, list(numerics)])


def _number(x: float) -> float | None:
    return None if math.isnan(x) else x


def _encode(v: KernelVerdict) -> dict[str, Any]:
    return {
        "ops": list(v.ops),
        "signature": v.signature,
        "cosine": _number(v.cosine),
        "max_abs_err": _number(v.max_abs_err),
        "max_rel_err": _number(v.max_rel_err),
        "unfused_max_abs_err": _number(v.unfused_max_abs_err),
        "unfused_cosine": _number(v.unfused_cosine),
        "verdict": v.verdict,
        "rows": v.rows,
        "full_rows": v.full_rows,
        "status": v.status.value,
    }


def _decode(row: Mapping[str, Any]) -> KernelVerdict:
    def num(k: str) -> float:
        x = row[k]
        return math.nan if x is None else float(x)

    return KernelVerdict(
        ops=tuple(str(o) for o in row["ops"]),
        signature=str(row["signature"]),
        cosine=num("cosine"),
        max_abs_err=num("max_abs_err"),
        max_rel_err=num("max_rel_err"),
        unfused_max_abs_err=num("unfused_max_abs_err"),
        unfused_cosine=num("unfused_cosine"),
        verdict=str(row["verdict"]),
        rows=int(row["rows"]),
        full_rows=int(row["full_rows"]),
        status=Status(row["status"]),
    )


def _read(path: Path) -> dict[str, dict[str, Any]]:
    """Every scope's verdicts in the file; {} for none, and for a file that is not ours."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("schema") != SCHEMA or not isinstance(doc.get("scopes"), dict):
            raise ValueError(f"schema {doc.get('schema')!r}")
        return doc["scopes"]
    except (OSError, ValueError, AttributeError) as exc:
        log.warning(
            "ignoring safe mode's verdicts in '%s' (%s); they will be checked again", path, exc
        )
        return {}


def load(path: Path, where: str) -> dict[tuple[str, Any], KernelVerdict]:
    """The verdicts kept in ``path`` under scope ``where`` (a row that does not read is
    left out: it is checked again)."""
    out = {}
    for text, row in _read(path).get(where, {}).items():
        try:
            sig, numerics = json.loads(text)
            out[(str(sig), tuple(numerics))] = _decode(row)
        except (ValueError, TypeError, KeyError):
            continue
    return out


def keep(path: Path, where: str, known: Mapping[tuple[str, Any], KernelVerdict]) -> int:
    """Add ``known`` to the verdicts of scope ``where`` in ``path`` (merged with what the
    file holds now, written atomically); how many verdicts the scope then holds."""
    scopes = _read(path)
    mine = scopes.setdefault(where, {})
    mine.update({_key(k): _encode(v) for k, v in known.items()})
    doc = {"schema": SCHEMA, "scopes": scopes}
    atomic_write_text(path, json.dumps(doc, sort_keys=True))
    return len(mine)


@contextlib.contextmanager
def kept(known: Known, scope_of: Callable[[], str], path: Path) -> Iterator[int]:
    """A study's safe mode with the verdicts of earlier studies: ``known`` (safe mode's
    verdicts, :attr:`~autotune.tuner.safety.Safety.known`) starts with those ``path`` keeps
    under the study's scope (``scope_of()``; how many: the value), and the verdicts it holds
    at the end are kept there for the next study, also when the study fails or is interrupted
    (each was reached whole)."""
    from autotune.progress import LOGGER

    where = scope_of()
    found = load(path, where)
    known.update(found)
    if found:
        logging.getLogger(LOGGER).info(
            "safe mode: %d kernel verdicts from earlier studies of this model (%s)",
            len(found),
            path,
        )
    try:
        yield len(found)
    finally:
        if set(known) - set(found):
            keep(path, where, known)
