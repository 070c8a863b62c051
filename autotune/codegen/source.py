"""Text of a kernel body: indented lines, and common subexpressions bound once to names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Body", "is_atom", "paren"]

_ATOM = re.compile(r"^-?[A-Za-z_][A-Za-z0-9_.]*$|^-?\d+(\.\d*)?(e[-+]?\d+)?$")


def is_atom(expr: str) -> bool:
    """A name or a number: safe to combine with an operator without parentheses."""
    return bool(_ATOM.match(expr)) or (expr.startswith("(") and _balanced_outer(expr))


def _balanced_outer(expr: str) -> bool:
    depth = 0
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(expr) - 1:
            return False
    return expr.endswith(")")


def paren(expr: str) -> str:
    return expr if is_atom(expr) else f"({expr})"


@dataclass
class Body:
    """Lines of one scope of a kernel (a loop body); an expression computed twice in the
    scope is bound to a name once (``bind``). A child scope sees its parent's names."""

    indent: int
    parent: Body | None = None
    lines: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    counter: list[int] = field(default_factory=lambda: [0])

    def child(self) -> Body:
        return Body(self.indent + 1, self, counter=self.counter)

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def lookup(self, expr: str) -> str | None:
        scope: Body | None = self
        while scope is not None:
            if expr in scope.names:
                return scope.names[expr]
            scope = scope.parent
        return None

    def bind(self, expr: str, prefix: str = "t") -> str:
        """A name holding ``expr`` in this scope (atoms are returned as they are)."""
        if is_atom(expr) and not expr.startswith("("):
            return expr
        found = self.lookup(expr)
        if found is not None:
            return found
        self.counter[0] += 1
        name = f"{prefix}{self.counter[0]}"
        self.line(f"{name} = {expr}")
        self.names[expr] = name
        return name

    def nest(self, header: str, inner: Body) -> None:
        """Append ``header:`` and the lines of ``inner`` (a child of this body)."""
        self.line(header)
        self.lines.extend(inner.lines or ["    " * inner.indent + "pass"])
