"""The pattern language of fusion rules: grammar and parser (matching: :mod:`.match`).

A pattern is a chain of *steps* along producer -> consumer edges of the kernel graph of a
:class:`~search_space.fusion.FusionContext` (views are transparent there)::

    MatMul|Gemm > Add[bias]? > Relu|Gelu

Grammar (whitespace is free)::

    pattern := chain | "(" chain ")" count      # the count form is for kind="siblings"
    chain   := step (">" step)*
    step    := alts quant? side*
    alts    := atom ("|" atom)*                 # alternatives
    atom    := OpType ("[" pred ("," pred)* "]")?
    pred    := "!"? name                        # "!" negates
    quant   := "?" | "*" | "+"                  # optional, zero or more, one or more
    side    := "<" alts quant? | "<" "(" chain ")" "?"?
    count   := "{" n "}" | "{" n "," m? "}"

- A *side* absorbs a producer of the step's other inputs: ``Add<Mul`` is an Add one of whose
  other inputs comes from a Mul. A side chain is read towards the step, so in
  ``MatMul<(Transpose? > Mul[scalar]?)`` the Mul feeds the MatMul and the Transpose feeds the Mul.
  Exporters write commutative ops in either operand order; steps and sides do not care.
- Predicates test the op: ``scalar`` (an input is a compile-time scalar), ``const`` (an input is
  compile-time: weight, constant, or computed from constants only), ``bias`` (a compile-time input
  with one non-unit dim equal to the output's last or channel dim), ``inner`` (every runtime input
  comes from an op already in the match, e.g. the Mul of SiLU), ``last_axis`` (reduces the last
  axis only).
- A step naming only views (Reshape, Dropout, ...) consumes no kernel op: it asserts that the
  previous op's output passes through such a view (``Softmax > Dropout``).
- Matching is greedy with backtracking, like a regular expression: optional and repeated steps
  take as many ops as they can while the rest of the chain still matches. Each op is used once
  per match; a match may start at any op its first required step (or an optional one before it)
  accepts, and a match inside a larger one of the same rule is dropped.
- Op types are checked against the ONNX ops the tool classifies (a typo gets a suggestion).
- ``siblings`` patterns match sibling matmuls reading one activation (horizontal fusion); the
  chain is matched from each sibling and ``{n}`` / ``{n,m}`` bounds how many there are.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import itertools
import math
import re
from dataclasses import dataclass

from search_space.exceptions import AutofusionError
from search_space.ir import CUBE_OPS, ELEMENTWISE_OPS, LAYOUT_OPS, REDUCE_OPS, VIEW_OPS

__all__ = ["INF", "PREDICATES", "Pattern", "RuleError", "Side", "Step", "compile_pattern"]


class RuleError(AutofusionError):
    """A fusion rule is malformed: bad pattern, unknown preset, bad config entry."""


PREDICATES = ("bias", "const", "inner", "last_axis", "scalar")
VIEW_TYPES = VIEW_OPS | {"Dropout"}
KNOWN_TYPES = CUBE_OPS | ELEMENTWISE_OPS | REDUCE_OPS | LAYOUT_OPS | VIEW_TYPES
INF = -1  # an unbounded repeat count
MAX_SIDE_ORDERS = 24  # side orders tried per match at most (else the written order only)


@dataclass(frozen=True)
class Atom:
    op_type: str
    preds: tuple[tuple[str, bool], ...]  # (name, wanted truth value)


@dataclass(frozen=True)
class Side:
    steps: tuple[Step, ...]
    optional: bool


@dataclass(frozen=True)
class Step:
    """One position of a chain: alternatives, a repeat range and side branches."""

    atoms: tuple[Atom, ...]
    lo: int
    hi: int  # INF = unbounded
    sides: tuple[Side, ...]
    text: str

    @functools.cached_property
    def types(self) -> frozenset[str]:
        return frozenset(a.op_type for a in self.atoms)

    @property
    def is_view(self) -> bool:
        return self.types <= VIEW_TYPES

    @functools.cached_property
    def has_inner(self) -> bool:
        return any(p == "inner" for a in self.atoms for p, _ in a.preds)


@dataclass(frozen=True)
class Pattern:
    steps: tuple[Step, ...]
    count: tuple[int, int] | None  # siblings only: (lo, hi), hi = INF for unbounded

    @functools.cached_property
    def side_orders(self) -> tuple[Pattern, ...]:
        """This pattern with the sides of each step in every order, itself first. Sides match
        greedily in order, so the first may take an op that a later side's longer chain
        needs (attention: Q's ``Transpose?`` taking K's Transpose, leaving K's Expand out);
        the matcher keeps the largest match over the orders."""
        orders = [
            list(itertools.permutations(st.sides)) if len(st.sides) > 1 else [st.sides]
            for st in self.steps
        ]
        if math.prod(len(o) for o in orders) > MAX_SIDE_ORDERS:  # a rule with many sides
            return (self,)
        return tuple(
            Pattern(
                tuple(
                    dataclasses.replace(st, sides=s)
                    for st, s in zip(self.steps, combo, strict=True)
                ),
                self.count,
            )
            for combo in itertools.product(*orders)
        )

    @functools.cached_property
    def first_types(self) -> frozenset[str]:
        """Op types a match can start at (the first step, or a later one after optionals)."""
        out: set[str] = set()
        for st in self.steps:
            if not st.is_view:
                out |= st.types
            if st.lo > 0:
                break
        return frozenset(out)


# -- parser ------------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<int>\d+)|(?P<sym>[>|?*+<()\[\],{}!]))"
)


class _Parser:
    def __init__(self, rule: str, text: str) -> None:
        self.rule, self.text = rule, text
        self.toks: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None:
                self.fail(f"unexpected character {text[pos:].lstrip()[0]!r}", pos)
            assert m is not None
            kind = m.lastgroup or "sym"
            self.toks.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0

    def fail(self, problem: str, col: int | None = None) -> None:
        if col is None:
            col = self.toks[self.i][2] if self.i < len(self.toks) else len(self.text)
        raise RuleError(
            f"rule '{self.rule}': bad pattern {self.text!r}: {problem} at column {col + 1}"
        )

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, sym: str | None = None, kind: str | None = None) -> str:
        tok = self.toks[self.i] if self.i < len(self.toks) else None
        if tok is None or (sym is not None and tok[1] != sym) or (kind and tok[0] != kind):
            want = repr(sym) if sym else ("an op type" if kind == "name" else "a number")
            got = repr(tok[1]) if tok else "the end"
            self.fail(f"expected {want}, found {got}")
        assert tok is not None
        self.i += 1
        return tok[1]

    def pattern(self, siblings: bool) -> Pattern:
        if siblings and self.peek() == "(":
            self.take("(")
            steps = self.chain(side=False)
            self.take(")")
            count = self.count()
        else:
            steps = self.chain(side=False)
            return self.end(Pattern(steps, (2, INF) if siblings else None))
        return self.end(Pattern(steps, count))

    def end(self, pat: Pattern) -> Pattern:
        if self.i < len(self.toks):
            kind, tok, _ = self.toks[self.i]
            between = " ('>' joins steps)" if kind == "name" else ""
            self.fail(f"unexpected {tok!r}{between}")
        return pat

    def count(self) -> tuple[int, int]:
        self.take("{")
        lo = int(self.take(kind="int"))
        hi = lo
        if self.peek() == ",":
            self.take(",")
            hi = int(self.take(kind="int")) if self.peek() != "}" else INF
        self.take("}")
        if lo < 2 or (hi != INF and hi < lo):
            got = f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
            self.fail(f"a sibling count {{n}} or {{n,m}} needs 2 <= n <= m, got {got}")
        return lo, hi

    def chain(self, side: bool) -> tuple[Step, ...]:
        steps = [self.step(side)]
        while self.peek() == ">":
            self.take(">")
            steps.append(self.step(side))
        return tuple(steps)

    def step(self, side: bool) -> Step:
        start = self.toks[self.i][2] if self.i < len(self.toks) else len(self.text)
        atoms = [self.atom()]
        while self.peek() == "|":
            self.take("|")
            atoms.append(self.atom())
        lo, hi = self.quant()
        sides: list[Side] = []
        while self.peek() == "<":
            if side:
                self.fail("a side branch cannot have side branches of its own")
            self.take("<")
            if self.peek() == "(":
                self.take("(")
                chain = self.chain(side=True)
                self.take(")")
                optional = self.peek() == "?"
                if optional:
                    self.take("?")
                sides.append(Side(chain, optional))
            else:
                sides.append(Side((self.step(side=True),), False))
        end = self.toks[self.i - 1][2] + len(self.toks[self.i - 1][1])
        st = Step(tuple(atoms), lo, hi, tuple(sides), self.text[start:end].strip())
        views = [a.op_type for a in atoms if a.op_type in VIEW_TYPES]
        if views and len(views) != len(atoms):
            self.fail(f"step '{st.text}' mixes views (free metadata, no kernel) and kernel ops")
        if views and (side or sides or any(a.preds for a in atoms)):
            self.fail(f"view step '{st.text}' can only assert a view after a kernel op")
        return st

    def quant(self) -> tuple[int, int]:
        q = self.peek()
        if q in ("?", "*", "+"):
            self.take()
            return {"?": (0, 1), "*": (0, INF), "+": (1, INF)}[q]
        return 1, 1

    def atom(self) -> Atom:
        col = self.toks[self.i][2] if self.i < len(self.toks) else len(self.text)
        name = self.take(kind="name")
        if name not in KNOWN_TYPES:
            close = difflib.get_close_matches(name, sorted(KNOWN_TYPES), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            self.fail(f"unknown op type '{name}'{hint}", col)
        preds: list[tuple[str, bool]] = []
        if self.peek() == "[":
            self.take("[")
            while True:
                want = True
                if self.peek() == "!":
                    self.take("!")
                    want = False
                pcol = self.toks[self.i][2] if self.i < len(self.toks) else len(self.text)
                pred = self.take(kind="name")
                if pred not in PREDICATES:
                    self.fail(
                        f"unknown predicate '{pred}'; available: {', '.join(PREDICATES)}", pcol
                    )
                preds.append((pred, want))
                if self.peek() != ",":
                    break
                self.take(",")
            self.take("]")
        return Atom(name, tuple(preds))


@functools.lru_cache(maxsize=512)
def compile_pattern(rule: str, text: str, kind: str) -> Pattern:
    """Parse a pattern string of a ``chain`` or ``siblings`` rule.

    Raises:
        RuleError: naming the rule, the problem and its column.
    """
    p = _Parser(rule, text)
    if not p.toks:
        p.fail("the pattern is empty", 0)
    pat = p.pattern(siblings=kind == "siblings")
    if pat.steps[0].is_view:
        p.fail(f"the first step '{pat.steps[0].text}' is a view, which is not a kernel op", 0)
    if kind == "siblings":
        first = pat.steps[0]
        if first.lo == 0 or not first.types <= {"MatMul", "Gemm"}:
            p.fail("a siblings pattern starts with a required MatMul|Gemm step", 0)
    return pat
