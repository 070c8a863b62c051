"""Example values for the dims of a dynamic graph input, for the error that asks for
``--input-shape``: values that agree with each other where the exporter wrote a dim as
arithmetic of others (``past + 1``). The dim strings come from the user's model: they are
parsed, never evaluated."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping

__all__ = ["bound_dim", "dim_names", "example_dim"]


def example_dim(dim: int | str) -> int:
    """A value for one dim in the error's example: a static dim itself; a named dim 1; a dim
    the exporter wrote as arithmetic of names (``past + 1``) that arithmetic with each name 1,
    so the example's dims agree with each other; anything else 1."""
    if isinstance(dim, int):
        return dim if dim > 0 else 1
    try:
        value = _arith(ast.parse(dim, mode="eval").body, {})
    except (SyntaxError, ValueError, ZeroDivisionError):
        return 1
    return value if value > 0 else 1


def dim_names(dim: int | str) -> frozenset[str]:
    """The names a dim is written in: ``{"past"}`` for ``past + 1``, ``{"seq"}`` for
    ``seq``; none for a static dim, or for a string that is not integer arithmetic of names
    (an exporter's ``unk__12`` is a name; ``?`` is none)."""
    if isinstance(dim, int):
        return frozenset()
    try:
        tree = ast.parse(dim, mode="eval").body
        _arith(tree, {})
    except (SyntaxError, ValueError, ZeroDivisionError):
        return frozenset()
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))


def bound_dim(dim: int | str, values: Mapping[str, int]) -> int | None:
    """A dim's value once its names are bound (``past + 1`` with past=7: 8); None when a name
    has no value or the arithmetic is not whole and positive."""
    if isinstance(dim, int):
        return dim if dim > 0 else None
    if not dim_names(dim) or not dim_names(dim) <= set(values):
        return None
    try:
        value = _arith(ast.parse(dim, mode="eval").body, values)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None
    return value if value > 0 else None


def _arith(node: ast.expr, values: Mapping[str, int]) -> int:
    """Integer arithmetic of names (each its value, 1 when unbound) and integers; ValueError
    for anything else."""
    if isinstance(node, ast.Name):
        return int(values.get(node.id, 1))
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp):
        a, b = _arith(node.left, values), _arith(node.right, values)
        ops: dict[type, Callable[[int, int], int]] = {
            ast.Add: operator.add,
            ast.Sub: operator.sub,
            ast.Mult: operator.mul,
            ast.FloorDiv: operator.floordiv,
        }
        if type(node.op) in ops:
            return ops[type(node.op)](a, b)
    raise ValueError("not integer arithmetic of names")
