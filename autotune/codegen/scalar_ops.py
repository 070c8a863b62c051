"""ONNX elementwise ops as Triton expressions over operands already read at one index.

Floats are computed in float32 whatever their storage type (half types are widened on load
and narrowed on store, as TorchInductor does); integers and booleans keep their type. Every
formula here uses only what triton-ascend documents as supported (arithmetic, comparisons,
``tl.where``, ``tl.exp``/``log``/``sqrt``/``erf``/``sin``/``cos``/``floor``/``ceil``,
``tl.maximum``/``minimum``, ``tl.abs``); tanh is written through ``tl.exp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.codegen.errors import Unsupported
from autotune.codegen.source import paren

__all__ = ["ELEMENTWISE", "TRITON_DTYPES", "cast_expr", "elementwise", "is_float"]

TRITON_DTYPES = {
    "float32": "tl.float32",
    "float16": "tl.float16",
    "bfloat16": "tl.bfloat16",
    "float64": "tl.float64",
    "int64": "tl.int64",
    "int32": "tl.int32",
    "int16": "tl.int16",
    "int8": "tl.int8",
    "uint8": "tl.uint8",
    "bool": "tl.int1",
}
_ONNX_TYPES = {
    1: "float32",
    10: "float16",
    16: "bfloat16",
    11: "float64",
    7: "int64",
    6: "int32",
    5: "int16",
    3: "int8",
    2: "uint8",
    9: "bool",
}

Attrs = Mapping[str, Any]
Formula = Callable[[Sequence[str], Attrs, str], str]


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def compute_dtype(dtype: str) -> str:
    """The type a value of storage type ``dtype`` is computed in."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def cast_expr(expr: str, src: str, dst: str) -> str:
    """``expr`` (computed as ``src``) converted as ONNX Cast to ``dst``, in ``dst``'s compute
    type; a float narrowed to a half type is rounded there and widened back."""
    if src == dst:
        return expr
    if dst not in TRITON_DTYPES:
        raise Unsupported(f"a cast to {dst}")
    if dst == "bool":
        return f"{paren(expr)} != 0"
    if dst in ("float16", "bfloat16"):
        return f"{paren(expr)}.to({TRITON_DTYPES[dst]}).to(tl.float32)"
    return f"{paren(expr)}.to({TRITON_DTYPES[compute_dtype(dst)]})"


def _lit(x: float) -> str:
    if math.isinf(x):
        return "float('inf')" if x > 0 else "float('-inf')"
    return repr(float(x))


def _tanh(a: str) -> str:
    return f"2.0 / (1.0 + tl.exp(-2.0 * {paren(a)})) - 1.0"


def _softplus(a: str) -> str:
    return f"tl.maximum({a}, 0.0) + tl.log(1.0 + tl.exp(-tl.abs({a})))"


def _div(v: Sequence[str], at: Attrs, dt: str) -> str:
    if is_float(dt):
        return f"{paren(v[0])} / {paren(v[1])}"
    # ONNX integer division truncates toward zero, as C does
    q = f"{paren(v[0])} // {paren(v[1])}"
    return q


def _pow(v: Sequence[str], at: Attrs, dt: str) -> str:
    base, exp = v
    try:
        e = float(exp)
    except ValueError:
        return f"tl.exp({paren(exp)} * tl.log({base}))"
    if e == int(e) and 0 < abs(e) <= 4:
        prod = " * ".join([paren(base)] * int(abs(e)))
        return prod if e > 0 else f"1.0 / ({prod})"
    if e == 0.5:
        return f"tl.sqrt({base})"
    if e == 0:
        return f"tl.full({base}.shape, 1.0, tl.float32)"
    return f"tl.exp({_lit(e)} * tl.log({base}))"


def _round(v: Sequence[str], at: Attrs, dt: str) -> str:
    a = v[0]
    r = f"tl.floor({paren(a)} + 0.5)"
    # halves go to the even neighbour (numpy and ONNX round half to even)
    return f"tl.where(({r} - {paren(a)} == 0.5) & ({r} % 2.0 != 0.0), {r} - 1.0, {r})"


def _clip(v: Sequence[str], at: Attrs, dt: str) -> str:
    out = v[0]
    if len(v) > 1 and v[1]:
        out = f"tl.maximum({out}, {v[1]})"
    if len(v) > 2 and v[2]:
        out = f"tl.minimum({out}, {v[2]})"
    return out


def _fold(fn: str) -> Formula:
    def formula(v: Sequence[str], at: Attrs, dt: str) -> str:
        out = v[0]
        for x in v[1:]:
            out = f"{fn}({out}, {x})"
        return out

    return formula


def _sum(v: Sequence[str], at: Attrs, dt: str) -> str:
    return " + ".join(paren(x) for x in v)


def _mean(v: Sequence[str], at: Attrs, dt: str) -> str:
    return f"({_sum(v, at, dt)}) / {float(len(v))}"


def _gelu(v: Sequence[str], at: Attrs, dt: str) -> str:
    a = paren(v[0])
    if at.get("approximate", "none") == "tanh":
        inner = f"0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})"
        return f"0.5 * {a} * (1.0 + {paren(_tanh(inner))})"
    return f"0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476))"


def _cast(v: Sequence[str], at: Attrs, dt: str) -> str:
    raise AssertionError("Cast is read by the pull, which knows the source type")


def _u(text: str) -> Formula:
    """A unary formula from a template with ``{a}`` (the operand) and ``{alpha}``-style attrs."""

    def formula(v: Sequence[str], at: Attrs, dt: str) -> str:
        return text.format(
            a=paren(v[0]), **{k: _lit(x) for k, x in at.items() if isinstance(x, float | int)}
        )

    return formula


def _b(op: str) -> Formula:
    return lambda v, at, dt: f"{paren(v[0])} {op} {paren(v[1])}"


ELEMENTWISE: dict[str, Formula] = {
    "Add": _b("+"),
    "Sub": _b("-"),
    "Mul": _b("*"),
    "Div": _div,
    "Pow": _pow,
    "Sqrt": _u("tl.sqrt({a})"),
    "Reciprocal": _u("1.0 / {a}"),
    "Neg": _u("-{a}"),
    "Abs": _u("tl.abs({a})"),
    "Exp": _u("tl.exp({a})"),
    "Log": _u("tl.log({a})"),
    "Relu": _u("tl.maximum({a}, 0.0)"),
    "Sigmoid": _u("1.0 / (1.0 + tl.exp(-{a}))"),
    "Tanh": lambda v, at, dt: _tanh(v[0]),
    "Erf": _u("tl.erf({a})"),
    "Gelu": _gelu,
    "Sin": _u("tl.sin({a})"),
    "Cos": _u("tl.cos({a})"),
    "Floor": _u("tl.floor({a})"),
    "Ceil": _u("tl.ceil({a})"),
    "Round": _round,
    "Sign": _u("tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0))"),
    "Softplus": lambda v, at, dt: _softplus(v[0]),
    "Softsign": _u("{a} / (1.0 + tl.abs({a}))"),
    "Mish": lambda v, at, dt: f"{paren(v[0])} * ({_tanh(_softplus(v[0]))})",
    "LeakyRelu": lambda v, at, dt: (
        f"tl.where({v[0]} >= 0, {v[0]}, {_lit(at.get('alpha', 0.01))} * {paren(v[0])})"
    ),
    "PRelu": lambda v, at, dt: f"tl.where({v[0]} >= 0, {v[0]}, {paren(v[1])} * {paren(v[0])})",
    "Elu": lambda v, at, dt: (
        f"tl.where({v[0]} >= 0, {v[0]}, {_lit(at.get('alpha', 1.0))} * (tl.exp({v[0]}) - 1.0))"
    ),
    "Selu": lambda v, at, dt: (
        f"{_lit(at.get('gamma', 1.0507009873554805))} * tl.where({v[0]} > 0, {v[0]}, "
        f"{_lit(at.get('alpha', 1.6732632423543772))} * (tl.exp({v[0]}) - 1.0))"
    ),
    "Celu": lambda v, at, dt: (
        f"tl.maximum({v[0]}, 0.0) + tl.minimum(0.0, {_lit(at.get('alpha', 1.0))} * "
        f"(tl.exp({paren(v[0])} / {_lit(at.get('alpha', 1.0))}) - 1.0))"
    ),
    "HardSigmoid": lambda v, at, dt: (
        f"tl.maximum(0.0, tl.minimum(1.0, {_lit(at.get('alpha', 0.2))} * {paren(v[0])} + "
        f"{_lit(at.get('beta', 0.5))}))"
    ),
    "HardSwish": _u("{a} * tl.maximum(0.0, tl.minimum(1.0, {a} / 6.0 + 0.5))"),
    "ThresholdedRelu": lambda v, at, dt: (
        f"tl.where({v[0]} > {_lit(at.get('alpha', 1.0))}, {v[0]}, 0.0)"
    ),
    "Clip": _clip,
    "Max": _fold("tl.maximum"),
    "Min": _fold("tl.minimum"),
    "Sum": _sum,
    "Mean": _mean,
    "Where": lambda v, at, dt: f"tl.where({v[0]}, {v[1]}, {v[2]})",
    "Equal": _b("=="),
    "Less": _b("<"),
    "Greater": _b(">"),
    "LessOrEqual": _b("<="),
    "GreaterOrEqual": _b(">="),
    "Not": _u("{a} == 0"),
    "And": _b("&"),
    "Or": _b("|"),
    "Xor": _b("^"),
    "IsNaN": _u("{a} != {a}"),
    "IsInf": _u("tl.abs({a}) == float('inf')"),
    "Identity": lambda v, at, dt: v[0],
    "Dropout": lambda v, at, dt: v[0],
}


def elementwise(op_type: str, operands: Sequence[str], attrs: Attrs, dtype: str) -> str:
    """The expression of one elementwise op; ``dtype`` is its output's storage type.

    Raises:
        Unsupported: an op this table does not hold.
    """
    formula = ELEMENTWISE.get(op_type)
    if formula is None:
        raise Unsupported(f"no template computes {op_type}")
    return formula(operands, attrs, compute_dtype(dtype))


def onnx_dtype(code: int) -> str:
    if code not in _ONNX_TYPES:
        raise Unsupported(f"ONNX element type {code}")
    return _ONNX_TYPES[code]
