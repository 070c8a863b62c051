"""A model graph laid out by Graphviz's ``dot`` (Debian's ``graphviz``): ops as boxes in
top-down layers, data edges between them, fused groups as coloured clusters. This module
writes the DOT source and runs ``dot`` for the SVG; :mod:`autotune.graph_page` makes it a page.

Every element carries an id the page's script finds it by: ``op<i>`` for op ``i``, ``e<j>``
for edge ``j`` and ``k<k>`` for cluster ``k``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.exceptions import AutotuneError

__all__ = [
    "DOT_HANG_S",
    "Cluster",
    "Drawing",
    "GraphvizMissing",
    "dot_source",
    "have_dot",
    "render_svg",
]

DOT_HANG_S = 600  # a hang guard on one layout, not a time limit (1,700 ops lay out in ~1 s)
LABEL_CHARS = 28  # an op's name is cut to this in its box (the panel shows it whole)
INSTALL = "install Graphviz (Debian: apt-get install graphviz)"


class GraphvizMissing(AutotuneError):
    """Graphviz's ``dot`` is not on the PATH."""


@dataclass(frozen=True)
class Cluster:
    """A box drawn around ops: ``members`` (op indices), a caption, a fill and a border."""

    members: tuple[int, ...]
    label: str
    fill: str = "#fff3e0"
    line: str = "#ff7f0e"


@dataclass(frozen=True)
class Drawing:
    """What to draw: ops as (name, type) with an optional fill each, edges as (producer,
    consumer) op indices with an optional colour each, clusters that share no op."""

    ops: Sequence[tuple[str, str]]
    edges: Sequence[tuple[int, int]]
    edge_colours: Sequence[str] = ()
    fills: Sequence[str] = ()
    clusters: Sequence[Cluster] = field(default_factory=tuple)


def quote(text: str) -> str:
    """``text`` as a DOT double-quoted string (newlines become centred line breaks)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'


def short(name: str) -> str:
    """An op's name as its box shows it: the last part of a scoped name, cut to fit, control
    characters (which SVG cannot carry) shown as ``?``."""
    tail = name.rstrip("/").rsplit("/", 1)[-1] or name
    tail = "".join("?" if unicodedata.category(c) in ("Cc", "Cs") else c for c in tail)
    return tail if len(tail) <= LABEL_CHARS else tail[: LABEL_CHARS - 1] + "…"


HEADER = (
    "digraph model {",
    '  graph [rankdir=TB, nodesep=0.25, ranksep=0.3, fontname="Helvetica", fontsize=11];',
    '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", color="#555555",',
    '        fontname="Helvetica", fontsize=10, height=0.32, margin="0.08,0.03"];',
    '  edge [color="#9a9a9a", arrowsize=0.55];',
)


def _node(i: int, name: str, op_type: str, fill: str | None) -> str:
    label = op_type if short(name) == op_type else f"{op_type}\n{short(name)}"
    paint = f", fillcolor={quote(fill)}" if fill else ""
    return f"  op{i} [id={quote(f'op{i}')}, label={quote(label)}{paint}];"


def _cluster(k: int, c: Cluster) -> list[str]:
    style = f'style="rounded,filled", fillcolor={quote(c.fill)}, color={quote(c.line)}'
    head = f"  subgraph cluster_{k} {{ graph [id={quote(f'k{k}')}, label={quote(c.label)}, "
    members = " ".join(f"op{i};" for i in c.members)
    return [f"{head}{style}, penwidth=1.6, fontsize=9]; {members} }}"]


def dot_source(d: Drawing) -> str:
    """The DOT text of ``d``.

    Raises:
        ValueError: an edge or cluster names an op that is not there, or two clusters share
            an op (Graphviz would draw a shared op in one of them only).
    """
    n = len(d.ops)
    seen: set[int] = set()
    for c in d.clusters:
        if any(not 0 <= i < n for i in c.members) or seen & set(c.members):
            raise ValueError(f"cluster '{c.label}' names a missing or shared op")
        seen |= set(c.members)
    lines = list(HEADER)
    fills = list(d.fills) + [""] * (n - len(d.fills))
    lines += [_node(i, name, t, fills[i]) for i, (name, t) in enumerate(d.ops)]
    for k, c in enumerate(d.clusters):
        lines += _cluster(k, c)
    for j, (a, b) in enumerate(d.edges):
        if not (0 <= a < n and 0 <= b < n):
            raise ValueError(f"edge {a} -> {b} names an op that is not there")
        colour = f", color={quote(d.edge_colours[j])}" if j < len(d.edge_colours) else ""
        lines.append(f"  op{a} -> op{b} [id={quote(f'e{j}')}{colour}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def have_dot() -> bool:
    return shutil.which("dot") is not None


_PROLOGUE = re.compile(r"\A.*?(?=<svg)", re.S)
_TITLE = re.compile(r"<title>[^<]*</title>\n?")


def render_svg(source: str) -> str:
    """The SVG ``dot`` draws of ``source``: the ``<svg>`` element alone (no XML prologue,
    no ``<title>`` tooltips, which would show Graphviz's ids), ready to inline in a page.

    Raises:
        GraphvizMissing: no ``dot`` on the PATH.
        AutotuneError: ``dot`` failed.
    """
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizMissing(f"Graphviz's 'dot' draws the graph and is not installed: {INSTALL}")
    run = subprocess.run(
        [exe, "-Tsvg"], input=source, capture_output=True, text=True, timeout=DOT_HANG_S
    )
    if run.returncode != 0:
        why = (run.stderr.strip().splitlines() or ["no message"])[-1]
        raise AutotuneError(f"Graphviz's dot could not lay out the graph: {why}")
    return _TITLE.sub("", _PROLOGUE.sub("", run.stdout, count=1))
