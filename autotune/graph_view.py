"""Graph views of a model (``report --html``, ``candidates --html``): ops in layers (the
longest path to each from the inputs), data edges between them; after tuning a box around each
fused group, before tuning each edge coloured by what becomes of the candidate that holds it."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from autotune.plotly_js import include
from search_space.fusion import FusionContext
from search_space.ir import Graph
from search_space.space import FusionPlan

__all__ = [
    "BOUND_COLOURS",
    "VERDICT_COLOURS",
    "candidates_graph",
    "candidates_page",
    "colour",
    "fused_graph",
    "kernel_graph",
    "layered",
    "repeats",
]

MIN_REPEATS = 3  # depths an op's structure must recur at to be drawn once (a repeated layer)
BOUND_COLOURS = {
    "hbm": "#d62728",
    "cube": "#1f77b4",
    "vector": "#2ca02c",
    "launch": "#7f7f7f",
    "l2": "#9467bd",
    "mte": "#ff7f0e",
}


def colour(bound: str) -> str:
    key = bound.lower()
    return next((c for k, c in BOUND_COLOURS.items() if key.startswith(k)), "#bcbd22")


def layered(n: int, edges: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """A position per op: its layer (the longest path to it from the inputs) and its row in
    that layer. Ops are numbered in a topological order (producers first)."""
    layer = [0] * n
    for a, b in sorted(edges, key=lambda e: e[1]):
        layer[b] = max(layer[b], layer[a] + 1)
    row: dict[int, int] = {}
    pos = []
    for i in range(n):
        pos.append((layer[i], row.get(layer[i], 0)))
        row[layer[i]] = row.get(layer[i], 0) + 1
    return pos


def repeats(same: Sequence[str], depth: Sequence[int]) -> tuple[list[int], list[int]]:
    """Repeated layers drawn once: each op's representative (an op of the same structural hash
    at the shallowest depth that hash has, matched by order among ops of that hash at one
    depth, so parallel twins such as q/k/v stay apart) and, per representative, how many
    layers it stands for. A hash seen at fewer than ``MIN_REPEATS`` depths is not folded."""
    by_hash: dict[str, dict[int, list[int]]] = {}
    for i, h in enumerate(same):
        by_hash.setdefault(h, {}).setdefault(depth[i], []).append(i)
    rep, count = list(range(len(same))), [1] * len(same)
    for at_depth in by_hash.values():
        if len(at_depth) < MIN_REPEATS:  # twice may be chance (two like Adds), not layers
            continue
        base = at_depth[min(at_depth)]
        for ops in at_depth.values():
            for j, i in enumerate(ops[: len(base)]):
                rep[i] = base[j]
        for j, b in enumerate(base):
            count[b] = sum(1 for ops in at_depth.values() if j < len(ops))
    return rep, count


def fused_graph(plan: FusionPlan) -> go.Figure | None:
    """The ops in layers (longest path from the inputs), data edges between them, and a box
    around each fused group, repeated layers drawn once (hover says how many); hover shows an
    op's kernel, config and latency."""
    graph = plan.meta.get("graph")
    if not graph:
        return None
    names = [n for n, _ in graph["ops"]]
    types = [t for _, t in graph["ops"]]
    depth = [p[0] for p in layered(len(names), graph["edges"])]
    rep, count = repeats(graph.get("same") or names, depth)
    keep = sorted(set(rep))
    new = {old: j for j, old in enumerate(keep)}
    edges = sorted(
        {(new[rep[a]], new[rep[b]]) for a, b in graph["edges"] if new[rep[a]] < new[rep[b]]}
    )
    pos = layered(len(keep), edges)
    kernel_of: dict[str, int] = {n: k for k, g in enumerate(plan.groups) for n in g.ops}
    rows = plan.meta.get("kernels") or [{} for _ in plan.groups]
    fig = go.Figure()
    ex: list[float | None] = []
    ey: list[float | None] = []
    for a, b in edges:
        ex += [pos[a][0], pos[b][0], None]
        ey += [pos[a][1], pos[b][1], None]
    fig.add_scatter(x=ex, y=ey, mode="lines", line={"color": "#bbbbbb", "width": 1},
                    hoverinfo="skip", name="data")  # fmt: skip
    hover = []
    for i in keep:
        n, t, k = names[i], types[i], kernel_of.get(names[i])
        times = f" x{count[i]} layers" if count[i] > 1 else ""
        if k is None:
            hover.append(f"{html.escape(n)} ({t}){times}")
            continue
        g, r = plan.groups[k], rows[k] if k < len(rows) else {}
        config = g.config.short() if g.config else "-"
        us = r.get("us")
        hover.append(
            f"{html.escape(n)} ({t}){times}<br>kernel {k}: {g.kind}, {len(g.ops)} ops<br>"
            f"{config}" + (f"<br>{us:.2f} us" if isinstance(us, int | float) else "")
        )
    fig.add_scatter(
        x=[p[0] for p in pos], y=[p[1] for p in pos], mode="markers", name="op",
        marker={"size": 7, "color": "#1f77b4"}, text=hover, hoverinfo="text",
    )  # fmt: skip
    at = {n: i for i, n in enumerate(names)}
    drawn: set[tuple[int, ...]] = set()
    for k, g in enumerate(plan.groups):
        members = tuple(sorted({new[rep[at[n]]] for n in g.ops if n in at}))
        if len(g.ops) < 2 or not members or members in drawn:
            continue
        drawn.add(members)
        fig.add_shape(
            type="rect",
            x0=min(pos[i][0] for i in members) - 0.35,
            x1=max(pos[i][0] for i in members) + 0.35,
            y0=min(pos[i][1] for i in members) - 0.35,
            y1=max(pos[i][1] for i in members) + 0.35,
            line={"color": colour(str(rows[k].get("bound", "")) if k < len(rows) else "")},
            fillcolor="rgba(255, 165, 0, 0.12)",
            name=f"group {k}",
        )
    folded = len(names) - len(keep)
    fig.update_layout(
        title="Fused graph (a box per fused group"
        + (f"; repeated layers drawn once, {folded} ops folded" if folded else "")
        + "; drag to zoom)",
        showlegend=False,
        xaxis={"title": "layer", "showgrid": False},
        yaxis={"visible": False},
        height=600,
    )
    return fig


VERDICT_COLOURS = {
    "fuse": "#2ca02c",
    "skip: below benefit_threshold": "#ff7f0e",
    "skip: buffer overflow": "#d62728",
    "skip: policy": "#9467bd",
    "skip: illegal": "#8c564b",
    "no rule": "#c7c7c7",
}


def candidates_graph(
    ops: Sequence[tuple[str, str]],
    edges: Sequence[Sequence[int]],
    candidates: Sequence[dict[str, object]],
) -> go.Figure:
    """The graph before tuning: every data edge coloured by the verdict of the candidate
    group that holds both its ends (fused, low benefit, buffer overflow, policy, illegal), or
    ``no rule`` when none does; hover on an edge's middle gives the candidate and the reason."""
    names = [n for n, _ in ops]
    pos = layered(len(names), edges)
    held: dict[str, set[int]] = {}  # candidate groups may overlap (a rule's and max's)
    for k, c in enumerate(candidates):
        for n in c["ops"]:  # type: ignore[attr-defined]
            held.setdefault(str(n), set()).add(k)
    fig = go.Figure()
    by_verdict: dict[str, tuple[list[float | None], list[float | None], list[str]]] = {}
    for a, b in edges:
        both = held.get(names[a], set()) & held.get(names[b], set())
        if both:
            c = candidates[min(both)]  # the first candidate that holds the edge
            verdict, why = str(c["verdict"]), f"{c['rule']}: {c['reason']}"
        else:
            verdict, why = "no rule", "no candidate group holds both ends"
        xs, ys, text = by_verdict.setdefault(verdict, ([], [], []))
        xs += [pos[a][0], (pos[a][0] + pos[b][0]) / 2, pos[b][0], None]
        ys += [pos[a][1], (pos[a][1] + pos[b][1]) / 2, pos[b][1], None]
        label = f"{html.escape(names[a])} -> {html.escape(names[b])}<br>{verdict}: {why}"
        text += [label] * 3 + [""]
    for verdict, (xs, ys, text) in by_verdict.items():
        fig.add_scatter(
            x=xs, y=ys, mode="lines+markers", name=verdict, text=text, hoverinfo="text",
            line={"color": VERDICT_COLOURS.get(verdict, "#bcbd22"), "width": 2},
            marker={"size": 3},
        )  # fmt: skip
    fig.add_scatter(
        x=[p[0] for p in pos], y=[p[1] for p in pos], mode="markers", name="op",
        marker={"size": 7, "color": "#1f77b4"},
        text=[f"{html.escape(n)} ({t})" for n, t in ops], hoverinfo="text",
    )  # fmt: skip
    fig.update_layout(
        title="Candidate fusions (edge colour: the verdict of the group holding it)",
        xaxis={"title": "layer", "showgrid": False},
        yaxis={"visible": False},
        height=600,
    )
    return fig


def kernel_graph(ctx: FusionContext) -> dict[str, list[list[Any]]]:
    """The kernel graph the views draw (and a plan records): each op's name and type, in
    topological order, and the data edges between ops (producer index, consumer index)."""
    names = list(ctx.nodes)
    at = {n: i for i, n in enumerate(names)}
    return {
        "ops": [[n, ctx.graph.op(n).op_type] for n in names],
        "edges": sorted([at[a], at[b]] for a in names for b in ctx.succ[a]),
    }


def candidates_page(
    graph: Graph, candidates: Sequence[dict[str, object]], title: str, plotly: str = "inline"
) -> str:
    """``candidates --html``: the model's kernel graph before tuning, each data edge coloured
    by its candidate's verdict, as one page (plotly.js as ``plotly`` says:
    :mod:`autotune.plotly_js`)."""
    kg = kernel_graph(FusionContext(graph))
    names = [n for n, _ in kg["ops"]]
    fig = candidates_graph([(n, t) for n, t in kg["ops"]], kg["edges"], candidates)
    fused = sum(1 for c in candidates if str(c["verdict"]) == "fuse")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}: candidate fusions</title></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{len(names)} kernels unfused, {len(candidates)} "
        f"candidate groups, {fused} worth fusing.</p>"
        + fig.to_html(
            full_html=False, include_plotlyjs=include(plotly, True), div_id="fig-candidates"
        )
        + "</body></html>"
    )
