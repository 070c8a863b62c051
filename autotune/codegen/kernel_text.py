"""A generated kernel read back from its text: the tile shape of every value, the tl calls
that make it, and the footprint of its tiles on the unified buffer and L1 (estimated as
docs/codegen-ascend-rules.md says). The triton-ascend rules (``ascend_rules``) read kernels
through it.
"""

from __future__ import annotations

import ast
import math
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from autotune.codegen.templates.common import KernelSource
from search_space.ir import Graph

__all__ = [
    "Footprint",
    "KernelText",
    "arg",
    "created_dtype",
    "footprint",
    "text_of",
    "tl_call",
    "tl_dtype",
]

_REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum"}
# element bytes in a footprint; int8, uint8 and bool count 2 (the overview: they take more)
_BYTES = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Footprint:
    """Bytes of one program's tiles: vector side (unified buffer), cube side (L1)."""

    vector: int
    cube: int
    double: bool


class KernelText:
    """One kernel's parsed text and what the rules read from it."""

    def __init__(self, kernel: KernelSource, graph: Graph):
        self.k, self.graph, self.consts = kernel, graph, dict(kernel.launch.constexprs)
        ins = {f"in{i}": t for i, t in enumerate(kernel.inputs)}
        outs = {f"out{i}": t for i, t in enumerate(kernel.outputs)}
        self.dtypes = {p: kernel.tensor_type(graph, t)[1] for p, t in (ins | outs).items()}
        tree = ast.parse(textwrap.dedent(kernel.text))
        self.fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
        self.shapes: dict[str, tuple[str, ...]] = {}
        self.values: dict[str, list[ast.expr]] = {}  # every value each name is assigned
        for stmt in _statements(self.fn.body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                self.shapes[stmt.targets[0].id] = self.shape(stmt.value)
                self.values.setdefault(stmt.targets[0].id, []).append(stmt.value)
            elif isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name):
                self.shapes[stmt.target.id] = ()
        self.calls = [n for n in ast.walk(self.fn) if isinstance(n, ast.Call)]

    def shape(self, expr: ast.AST) -> tuple[str, ...]:
        """A value's tile shape: one lane extent per dimension (a constexpr name, a literal,
        or '1'), through names, indexing with None, broadcasting, tl.dot and reductions."""
        if isinstance(expr, ast.Name):
            return self.shapes.get(expr.id, ())
        if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Tuple):
            dims = iter(self.shape(expr.value))
            return tuple("1" if text_of(e) == "None" else next(dims, "1") for e in expr.slice.elts)
        if not isinstance(expr, ast.Call):
            return _broadcast([self.shape(c) for c in ast.iter_child_nodes(expr)])
        kind, args = tl_call(expr), expr.args
        if kind == "arange" and len(args) > 1:
            return (ast.unparse(args[1]),)
        if kind in ("zeros", "full") and args and isinstance(args[0], ast.List | ast.Tuple):
            return tuple(ast.unparse(e) for e in args[0].elts)
        if kind == "dot" and len(args) > 1:
            a, b = self.shape(args[0]), self.shape(args[1])
            return (*a[:-1], *b[-1:]) if a and b else ()
        if kind in _REDUCTIONS and args:
            x, axis = self.shape(args[0]), arg(expr, 1, "axis")
            if not (x and isinstance(axis, ast.Constant) and isinstance(axis.value, int)):
                return ()
            return tuple(d for i, d in enumerate(x) if i != axis.value % len(x))
        parts = [self.shape(a) for a in [*args, *(kw.value for kw in expr.keywords)]]
        if isinstance(expr.func, ast.Attribute) and not kind:
            parts.append(self.shape(expr.func.value))  # x.to(...): x's shape
        return () if kind in ("program_id", "num_programs") else _broadcast(parts)

    def extent(self, dim: str) -> int | None:
        """A lane extent's value: a constexpr of the launch or a literal (None: neither)."""
        return self.consts[dim] if dim in self.consts else int(dim) if dim.isdigit() else None

    def elements(self, expr: ast.AST) -> int:
        return math.prod(self.extent(d) or 1 for d in self.shape(expr))

    def pointer(self, call: ast.Call) -> str:
        """The kernel parameter a load addresses ('' if it names none)."""
        names = [n.id for a in call.args[:1] for n in ast.walk(a) if isinstance(n, ast.Name)]
        return next((n for n in names if n in self.dtypes), "")

    def feeding(self, *exprs: ast.expr) -> Iterator[ast.Call]:
        """The tl calls that make the values of ``exprs``, through the names they read."""
        todo, seen = list(exprs), set[str]()
        while todo:
            for node in ast.walk(todo.pop()):
                if isinstance(node, ast.Call) and tl_call(node):
                    yield node
                elif isinstance(node, ast.Name) and node.id in self.values.keys() - seen:
                    seen.add(node.id)
                    todo += self.values[node.id]

    def tl_calls(self, *names: str) -> Iterator[ast.Call]:
        return (c for c in self.calls if tl_call(c) in names)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements in source order, into loop and branch bodies."""
    for stmt in body:
        yield stmt
        for attr in ("body", "orelse"):
            yield from _statements(getattr(stmt, attr, []))


def text_of(node: ast.expr | None) -> str:
    return ast.unparse(node) if node is not None else ""


def _broadcast(shapes: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Right-aligned broadcasting of tile shapes ('1' gives way to any other extent)."""
    rank = max((len(s) for s in shapes), default=0)
    out = ["1"] * rank
    for s in shapes:
        for i, d in enumerate(s, start=rank - len(s)):
            out[i] = d if out[i] == "1" else out[i]
    return tuple(out)


def tl_call(node: ast.AST) -> str:
    """``xxx`` for a call of ``tl.xxx``, else ''."""
    return tl_dtype(node.func) if isinstance(node, ast.Call) else ""


def tl_dtype(expr: ast.AST | None) -> str:
    """``float16`` for ``tl.float16`` (any ``tl.xxx`` attribute), else ''."""
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return expr.attr if expr.value.id == "tl" else ""
    return ""


def arg(call: ast.Call, pos: int, name: str) -> ast.expr | None:
    found = [kw.value for kw in call.keywords if kw.arg == name]
    return found[0] if found else (call.args[pos] if len(call.args) > pos else None)


def created_dtype(node: ast.expr) -> str:
    """The dtype a ``tl.zeros`` or ``tl.full`` names ('' for another value, or none named)."""
    kind = tl_call(node)
    if isinstance(node, ast.Call) and kind in ("zeros", "full"):
        return tl_dtype(arg(node, 1 if kind == "zeros" else 2, "dtype"))
    return ""


def _converted_to(expr: ast.expr) -> str:
    """``float16`` for ``x.to(tl.float16)``, else ''."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.args:
        return tl_dtype(expr.args[0]) if expr.func.attr == "to" else ""
    return ""


def _operand_bytes(kc: KernelText) -> dict[int, int]:
    """Each tl call feeding a ``tl.dot`` operand -> its element size in L1: the format the
    operand is converted to (``x.to(tl.float16)``), else as created (0)."""
    sizes: dict[int, int] = {}
    for dot in kc.tl_calls("dot"):
        for operand in dot.args[:2]:
            size = _BYTES.get(_converted_to(operand), 0)
            for call in kc.feeding(operand):
                sizes[id(call)] = min(sizes.get(id(call), size), size) if size else 0
    return sizes


def footprint(kernel: KernelSource, graph: Graph) -> Footprint:
    """One kernel's tile footprint, estimated as docs/codegen-ascend-rules.md says: the
    tiles of its statements as if all were live at once, except the parts that never are
    together: the phases ``tl.debug_barrier()`` separates and the branches of an ``if``
    (the larger of them counts)."""
    kc = KernelText(kernel, graph)
    tiles = {id(call): (side, size) for call, side, size in _tiles(kc)}
    vector, cube = _live(kc.fn.body, tiles)
    return Footprint(vector, cube, kc.k.launch.num_stages > 1)


Bytes = tuple[int, int]  # vector side, cube side


def _live(stmts: list[ast.stmt], tiles: dict[int, Bytes]) -> Bytes:
    """The bytes of the tiles ``stmts`` make, as :func:`footprint` counts them."""
    phases: list[Bytes] = [(0, 0)]
    for st in stmts:
        if isinstance(st, ast.Expr) and tl_call(st.value) == "debug_barrier":
            phases.append((0, 0))
            continue
        if isinstance(st, ast.If):
            then, other = _live(st.body, tiles), _live(st.orelse, tiles)
            part = _plus(
                _calls([st.test], tiles), (max(then[0], other[0]), max(then[1], other[1]))
            )
        elif isinstance(st, ast.For | ast.While):
            head = [st.iter] if isinstance(st, ast.For) else [st.test]
            part = _plus(_calls(head, tiles), _live(st.body, tiles))
        else:
            part = _calls([st], tiles)
        phases[-1] = _plus(phases[-1], part)
    return max(p[0] for p in phases), max(p[1] for p in phases)


def _calls(nodes: Sequence[ast.AST], tiles: dict[int, Bytes]) -> Bytes:
    found = [tiles[id(n)] for node in nodes for n in ast.walk(node) if id(n) in tiles]
    return (sum(b for side, b in found if side == 0), sum(b for side, b in found if side == 1))


def _plus(a: Bytes, b: Bytes) -> Bytes:
    return a[0] + b[0], a[1] + b[1]


def _tiles(kc: KernelText) -> Iterator[tuple[ast.Call, int, int]]:
    """Every tile a load or creation makes: the call, its side (0 vector, 1 cube) and bytes."""
    operands = _operand_bytes(kc)
    double = kc.k.launch.num_stages > 1
    for call in kc.tl_calls("load", "zeros", "full"):
        kind = tl_call(call)
        if kind == "load":  # a second buffer when double-buffered
            size = _BYTES.get(kc.dtypes.get(kc.pointer(call), "float32"), 2) * (1 + double)
        else:
            size = _BYTES.get(created_dtype(call) or "float32", 2)
        if operands.get(id(call)):  # held in L1 in the format the dot takes it
            size = min(size, operands[id(call)] * (1 + (kind == "load" and double)))
        yield call, int(id(call) in operands), kc.elements(call) * size
