"""Example values for the dims of a dynamic graph input, for the error that asks for
``--input-shape``: values that agree with each other where the exporter wrote a dim as
arithmetic of others (``past + 1``). The dim strings come from the user's model: they are
parsed, never evaluated."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

__all__ = ["example_dim"]


def example_dim(dim: int | str) -> int:
    """A value for one dim in the error's example: a static dim itself; a named dim 1; a dim
    the exporter wrote as arithmetic of names (``past + 1``) that arithmetic with each name 1,
    so the example's dims agree with each other; anything else 1."""
    if isinstance(dim, int):
        return dim if dim > 0 else 1
    try:
        value = _arith(ast.parse(dim, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return 1
    return value if value > 0 else 1


def _arith(node: ast.expr) -> int:
    """Integer arithmetic of names (each 1) and integers; ValueError for anything else."""
    if isinstance(node, ast.Name):
        return 1
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp):
        a, b = _arith(node.left), _arith(node.right)
        ops: dict[type, Callable[[int, int], int]] = {
            ast.Add: operator.add,
            ast.Sub: operator.sub,
            ast.Mult: operator.mul,
            ast.FloorDiv: operator.floordiv,
        }
        if type(node.op) in ops:
            return ops[type(node.op)](a, b)
    raise ValueError("not integer arithmetic of names")
