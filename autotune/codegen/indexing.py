"""Index arithmetic on static shapes, as Triton expressions (row-major, contiguous buffers).

An index of a tensor is one expression per dim; a dim of size 1 is ``"0"``. Expressions use
only names, integers, ``+ - * // %`` and parentheses, so that they can also be evaluated with
numpy to prove two indices equal (:func:`same_index`).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune.codegen.source import paren

__all__ = [
    "Index",
    "add",
    "broadcast_index",
    "evaluate",
    "lane_index",
    "mul",
    "offset",
    "reshape_index",
    "same_index",
    "sample",
    "strides",
    "substitute",
    "unflatten",
]

Index = tuple[str, ...]


def strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def add(a: str, b: str) -> str:
    if a == "0":
        return b
    if b == "0":
        return a
    if b.startswith("-"):
        return f"{a} - {paren(b[1:])}"
    return f"{a} + {b}"


def mul(a: str, k: int) -> str:
    if k == 0 or a == "0":
        return "0"
    return a if k == 1 else f"{paren(a)} * {k}"


def offset(idx: Index, shape: Sequence[int]) -> str:
    """The element offset of ``idx`` in a contiguous tensor of ``shape`` (the flat variable
    itself when ``idx`` is that variable unflattened over ``shape``)."""
    flat = _flat_name(idx)
    if flat and unflatten(flat, shape) == tuple(idx):
        return flat
    out = "0"
    for i, st, d in zip(idx, strides(shape), shape, strict=True):
        if d != 1:
            out = add(out, mul(i, st))
    return out


def _flat_name(idx: Index) -> str:
    last = next((e for e in reversed(idx) if e != "0"), "")
    name = last.split(" % ")[0]
    return name if name.isidentifier() else ""


def substitute(idx: Index, name: str, by: str) -> Index:
    """``idx`` with the variable ``name`` (a whole word) replaced by the expression ``by``."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    return tuple(word.sub(paren(by), e) for e in idx)


def unflatten(flat: str, shape: Sequence[int]) -> Index:
    """The index of element ``flat`` (assumed in range) of a tensor of ``shape``."""
    out = []
    first = next((i for i, d in enumerate(shape) if d != 1), len(shape))
    for i, (st, d) in enumerate(zip(strides(shape), shape, strict=True)):
        if d == 1:
            out.append("0")
            continue
        part = flat if st == 1 else f"{paren(flat)} // {st}"
        out.append(part if i == first else f"{paren(part)} % {d}")
    return tuple(out)


def broadcast_index(idx: Index, out_shape: Sequence[int], in_shape: Sequence[int]) -> Index:
    """Numpy broadcasting: the index of an operand of ``in_shape`` read at ``idx`` of the
    broadcast result (right-aligned dims; a dim of 1 reads element 0)."""
    lead = len(out_shape) - len(in_shape)
    return tuple("0" if d == 1 else idx[lead + j] for j, d in enumerate(in_shape))


def _groups(a: Sequence[int], b: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Consecutive dims of ``a`` and ``b`` (sizes-1 dims dropped) with equal products."""
    ia = [i for i, d in enumerate(a) if d != 1]
    ib = [i for i, d in enumerate(b) if d != 1]
    out: list[tuple[list[int], list[int]]] = []
    ga: list[int] = []
    gb: list[int] = []
    pa = pb = 1
    while ia or ib:
        if pa <= pb and ia:
            ga.append(ia.pop(0))
            pa *= a[ga[-1]]
        else:
            gb.append(ib.pop(0))
            pb *= b[gb[-1]]
        if pa == pb:
            out.append((ga, gb))
            ga, gb, pa, pb = [], [], 1, 1
    return out


def reshape_index(idx: Index, out_shape: Sequence[int], in_shape: Sequence[int]) -> Index:
    """The index in a reshape's input of element ``idx`` of its output (same element order):
    dims that only moved are passed through, merged or split dims flattened and unflattened."""
    res = ["0"] * len(in_shape)
    for ga, gb in _groups(out_shape, in_shape):
        if len(ga) == 1 and len(gb) == 1:
            res[gb[0]] = idx[ga[0]]
            continue
        flat = offset(tuple(idx[i] for i in ga), [out_shape[i] for i in ga])
        for i, e in zip(gb, unflatten(flat, [in_shape[i] for i in gb]), strict=True):
            res[i] = e
    return tuple(res)


def evaluate(expr: str, env: dict[str, np.ndarray]) -> np.ndarray:
    """An index expression (names, integers, ``+ - * // %``, parentheses) or a condition on
    them (one comparison, ``&``, ``|``) on numpy arrays, read with ``ast`` (never ``eval``);
    anything else raises ValueError."""

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
            return _CMP[type(node.ops[0])](walk(node.left), walk(node.comparators[0]))
        raise ValueError(f"not index arithmetic: {ast.dump(node)[:60]}")

    return np.asarray(walk(ast.parse(expr, mode="eval")))


_OPS: dict[type, Any] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.BitAnd: lambda a, b: np.logical_and(a, b),
    ast.BitOr: lambda a, b: np.logical_or(a, b),
}
_CMP: dict[type, Any] = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
}


def same_index(a: Index, b: Index, env: dict[str, np.ndarray], where: Sequence[str] = ()) -> bool:
    """Whether two indices name the same element at every point of ``env`` (numpy arrays of
    the tile's index variables) where every condition in ``where`` holds; an index that is
    not plain arithmetic (or a condition that is not) is never the same."""
    if a == b:
        return True
    if len(a) != len(b):
        return False
    try:
        keep = [evaluate(w, env) for w in where]
    except (ValueError, SyntaxError):
        return False
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        try:
            vx, vy = evaluate(x, env), evaluate(y, env)
            shape = np.broadcast_shapes(vx.shape, vy.shape, *(k.shape for k in keep))
        except (ValueError, SyntaxError):  # not arithmetic, or sampled on clashing axes
            return False
        held = np.ones(shape, dtype=bool)
        for k in keep:
            held &= np.broadcast_to(k, shape)
        if not np.array_equal(np.broadcast_to(vx, shape)[held], np.broadcast_to(vy, shape)[held]):
            return False
    return True


def sample(n: int, most: int = 61) -> np.ndarray:
    """At most ``most`` points of ``range(n)``, both ends included, evenly spread: where
    :func:`same_index` compares two indices."""
    return np.unique(np.linspace(0, n - 1, min(n, most)).astype(np.int64))


def lane_index(names: Sequence[str], dims: Sequence[int]) -> Index:
    """The tile's lane variables as the index of trailing dims ``dims`` (a dim of 1: ``0``)."""
    return tuple("0" if d == 1 else n for n, d in zip(names, dims, strict=True))


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)
