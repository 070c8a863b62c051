"""A real row's ``shapes`` column as named input dims.

The public collections write ``x=[128,512], W=[512,512] -> y=[128,512]`` (names joined by
``=`` share dims, ``name: [dims]`` too); other sources write the shapes without names
(``(4096, 4096)``, ``[4096,4096] x [4096,4096]``, a bare ``64M``) or as the op's dims
(``M=4096, N=4096, K=4096`` for a matmul, ``B=1, N=32, S=2048, D=128`` for attention).
msprof's kernel_details write the inputs' dims joined by ``;``, each dims list by ``,``, and an
empty entry for a scalar (``"20480,5120;20480,10240"``, ``"87351296;"``).
Unnamed shapes are named ``x`` (one) or ``a``, ``b``, ``c``... in order, as the one-kernel
builders take inputs by position when their names are not there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from costmodel.exceptions import MeasurementError

__all__ = ["parse_dims", "parse_tensors"]

_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_TENSOR = re.compile(r"((?:[A-Za-z_][\w.]*\s*[=:]\s*)+)[\[(]([^\])]*)[\])]")
_GROUP = re.compile(r"[\[(]([^\])]*)[\])]")
_LETTER = re.compile(r"\b([A-Za-z][A-Za-z_]*)\s*=\s*(\d[\w.^*]*)")
_FORMAT = "write them as name=[d0,d1,...]"


def parse_dims(text: str) -> tuple[int, ...]:
    """``"2, 64, 4K"`` -> ``(2, 64, 4096)``; products (``64*1024``) and powers (``2^26``) too.

    Raises:
        MeasurementError: a dim that is not a positive whole number.
    """
    dims = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        value = 1
        for factor in re.split(r"\s*[*x×]\s*", part):
            m = re.fullmatch(r"(\d+)\s*\^\s*(\d+)|(\d+(?:\.\d+)?)\s*([kmgKMG])?i?", factor.strip())
            if m is None:
                raise MeasurementError(f"dim {part!r} is not a whole number")
            if m.group(1):
                value *= int(m.group(1)) ** int(m.group(2))
            else:
                number = float(m.group(3)) * _SUFFIX.get((m.group(4) or "").lower(), 1)
                if number != int(number):
                    raise MeasurementError(f"dim {part!r} is not a whole number")
                value *= int(number)
        if value < 1:
            raise MeasurementError(f"dim {part!r} must be >= 1")
        dims.append(value)
    return tuple(dims)


def _dims_or_none(text: str) -> tuple[int, ...] | None:
    try:
        return parse_dims(text) or None
    except MeasurementError:
        return None


def parse_tensors(shapes: str, family: str | None = None) -> dict[str, tuple[int, ...]]:
    """The inputs of a shapes column, in order: named (``x=[..]``, ``x: [..]``), else every
    bracketed group that is a list of dims, else the op's dims (``M=4096, N=..., K=...``) as
    ``family``'s input shapes, else the whole text as one input's dims (``64M``).

    Raises:
        MeasurementError: nothing before ``->`` reads as a shape, a named dim does not parse, or
            op dims that ``family`` cannot place.
    """
    inputs = shapes.split("->")[0].replace('"', "")
    listed = _msprof(inputs)
    if listed:
        return listed
    found: dict[str, tuple[int, ...]] = {}
    for m in _TENSOR.finditer(inputs):
        dims = parse_dims(m.group(2))
        if not dims:
            continue
        for name in (n.strip() for n in re.split(r"[=:]", m.group(1)) if n.strip()):
            found.setdefault(name, dims)
    if found:
        return found
    groups = [d for d in (_dims_or_none(g) for g in _GROUP.findall(inputs)) if d]
    if groups:
        names = ["x"] if len(groups) == 1 else [chr(ord("a") + i) for i in range(len(groups))]
        return dict(zip(names, groups, strict=False))
    letters = {k: parse_dims(v)[0] for k, v in _LETTER.findall(inputs)}  # one dim each
    if letters:
        return _from_op_dims(family, letters)
    whole = _dims_or_none(inputs.strip())
    if whole:
        return {"x": whole}
    raise MeasurementError(f"no input shape in {shapes!r} ({_FORMAT})")


def _msprof(text: str) -> dict[str, tuple[int, ...]] | None:
    """msprof's form (``a,b;c,d``, remarks in parentheses aside): each non-empty entry an
    input, unnamed; ``None`` for text of another form."""
    bare = re.sub(r"\([^()]*\)", " ", text).strip()
    if ";" not in bare or not re.fullmatch(r"[\d,;\s]+", bare):
        return None
    dims = [parse_dims(part) for part in bare.split(";") if part.strip()]
    if not dims:
        return None
    names = ["x"] if len(dims) == 1 else [chr(ord("a") + i) for i in range(len(dims))]
    return dict(zip(names, dims, strict=True))


def _pick(dims: Mapping[str, int], *names: str, default: int | None = None) -> int:
    for n in names:
        if n in dims:
            return dims[n]
    if default is None:
        raise MeasurementError(f"the shapes name no {' or '.join(names)}")
    return default


def _from_op_dims(family: str | None, d: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """A matmul's (``M, N, K[, B]``), a GEMV's or an attention's (``B, N, S, D[, T, NKV]``) op
    dims as its input shapes.

    Raises:
        MeasurementError: op dims of another family, or without one the family needs.
    """
    if family == "matmul":
        m, n, k = _pick(d, "M"), _pick(d, "N"), _pick(d, "K")
        batch = _pick(d, "B", default=1)
        lead = (batch,) if batch > 1 else ()
        return {"a": (*lead, m, k), "b": (*lead, k, n)}
    if family == "gemv":
        return {"A": (_pick(d, "M", "N"), _pick(d, "K")), "x": (_pick(d, "K"),)}
    if family == "attention":
        b, heads = _pick(d, "B", default=1), _pick(d, "N", "H")
        s, dim = _pick(d, "S", "SQ", "Sq"), _pick(d, "D")
        keys = _pick(d, "T", "SKV", "Skv", "SK", "Sk", "KV", default=s)
        kv_heads = _pick(d, "NKV", "Nkv", "KVN", "G", default=heads)
        return {
            "q": (b, heads, s, dim),
            "k": (b, kv_heads, keys, dim),
            "v": (b, kv_heads, keys, dim),
        }
    raise MeasurementError(
        f"{family or 'these'} rows take their input shapes, not op dims ({', '.join(d)}); "
        f"{_FORMAT}"
    )
