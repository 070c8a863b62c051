"""A graph view as HTML: the SVG Graphviz lays out (:mod:`autotune.graph_dot`), a legend, a
search box, and the panel a click fills, driven by one small script (``assets/graph.js``) and
style sheet (``assets/graph.css``) that a page carries once, inline: the page opens offline."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files

from autotune.graph_dot import dot_source, render_svg
from autotune.graph_view import View
from autotune.safe_text import html_text

__all__ = ["block", "page", "script", "style"]


@cache
def _asset(name: str) -> str:
    return files("autotune").joinpath("assets", name).read_text(encoding="utf-8")


def style() -> str:
    """The viewer's style sheet, for a page's ``<head>``."""
    return f"<style>\n{_asset('graph.css')}</style>"


def script() -> str:
    """The viewer's script, for the end of a page's ``<body>`` (after every block)."""
    return f"<script>\n{_asset('graph.js')}</script>"


def _data(view: View) -> str:
    """What the script reads: each element's panel rows, op names (the search box), and the
    elements lit with one (an op's edges, an edge's ops, a cluster's ops)."""
    d = view.drawing
    rows = {f"op{i}": r for i, r in enumerate(view.ops)}
    rows |= {f"e{j}": r for j, r in enumerate(view.edges)}
    rows |= {f"k{k}": r for k, r in enumerate(view.clusters)}
    links: dict[str, list[str]] = {f"op{i}": [] for i in range(len(d.ops))}
    for j, (a, b) in enumerate(d.edges):
        links[f"op{a}"].append(f"e{j}")
        links[f"op{b}"].append(f"e{j}")
        links[f"e{j}"] = [f"op{a}", f"op{b}"]
    for k, c in enumerate(d.clusters):
        links[f"k{k}"] = [f"op{i}" for i in c.members]
    doc = {"rows": rows, "links": links, "names": {f"op{i}": n for i, (n, _) in enumerate(d.ops)}}
    # no '<' at all in a script element: '</script' would end it, '<!--' turn its parsing
    return json.dumps(doc, separators=(",", ":")).replace("<", "\\u003c")


def block(view: View, key: str) -> str:
    """The view as one ``<div class='gv'>`` (Graphviz runs here).

    Raises:
        GraphvizMissing: no ``dot`` on the PATH.
    """
    svg = render_svg(dot_source(view.drawing))
    legend = "".join(
        f"<span style='--swatch:{html_text(c)}'>{html_text(text)}</span>"
        for c, text in view.legend
    )
    return (
        f"<div class='gv' id='gv-{html_text(key)}'>"
        f"<p class='gv-caption'>{html_text(view.caption)}</p>"
        "<div class='gv-bar'><button class='gv-fit'>whole graph</button>"
        "<button class='gv-actual'>actual size</button>"
        "<input class='gv-find' placeholder='find an op by name (Enter)'>"
        f"<div class='gv-legend'>{legend}</div></div>"
        f"<div class='gv-body'><div class='gv-canvas'>{svg}</div>"
        "<div class='gv-panel'>Click an op, an edge or a box for its details; wheel to zoom, "
        "drag to pan.</div></div>"
        f"<script type='application/json' class='gv-data'>{_data(view)}</script></div>"
    )


def page(title: str, heading: str, body: str) -> str:
    """A whole page around graph blocks: the style sheet, ``body``, then the script."""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html_text(title)}</title>{style()}</head><body>"
        f"<h1>{html_text(heading)}</h1>{body}{script()}</body></html>"
    )
