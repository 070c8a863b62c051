"""Graph views of a model (``report --html``, ``candidates --html``), laid out by Graphviz
(:mod:`autotune.graph_dot`) and shown by :mod:`autotune.graph_page`: after tuning, each fused
group a cluster coloured by what bounds its kernel; before tuning, each data edge coloured by
what becomes of the candidate group that holds it. Clicking an op, an edge or a cluster shows
what the view knows of it (names, shapes, kernel, config, latency, verdict)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.graph_dot import Cluster, Drawing
from search_space.fusion import FusionContext
from search_space.ir import Graph
from search_space.space import FusionPlan

__all__ = [
    "BOUND_COLOURS",
    "VERDICT_COLOURS",
    "View",
    "candidates_view",
    "colour",
    "fused_view",
    "kernel_graph",
]

BOUND_COLOURS = {
    "hbm": "#d62728",
    "cube": "#1f77b4",
    "vector": "#2ca02c",
    "launch": "#7f7f7f",
    "l2": "#9467bd",
    "mte": "#ff7f0e",
}
VERDICT_COLOURS = {
    "fuse": "#2ca02c",
    "skip: below benefit_threshold": "#ff7f0e",
    "skip: buffer overflow": "#d62728",
    "skip: policy": "#9467bd",
    "skip: illegal": "#8c564b",
    "no rule": "#c7c7c7",
}
CUBE_TYPES = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger"})
Rows = list[tuple[str, str]]  # what the panel shows of one element: (field, value)


def colour(bound: str) -> str:
    key = bound.lower()
    return next((c for k, c in BOUND_COLOURS.items() if key.startswith(k)), "#bcbd22")


@dataclass(frozen=True)
class View:
    """A drawing and what the page's panel shows of each op, edge and cluster (in the
    drawing's order), with a legend of (colour, meaning)."""

    drawing: Drawing
    ops: list[Rows]
    edges: list[Rows]
    clusters: list[Rows]
    legend: list[tuple[str, str]]
    caption: str


_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}


def _shape(graph: Graph, tensor: str) -> str:
    t = graph.tensors.get(tensor)
    if t is None:
        return "?"
    dtype = _DTYPES.get(t.dtype, t.dtype.replace("int", "i"))
    dims = "?" if t.shape is None else ",".join(str(d) for d in t.shape)
    return f"{dtype}[{dims}]"


def kernel_graph(ctx: FusionContext) -> dict[str, list[Any]]:
    """The kernel graph the views draw (and a plan records): each op's name and type, in
    topological order, the data edges between ops (producer index, consumer index) and each
    op's tensors as ``inputs -> outputs`` (dtype and shape each)."""
    names = list(ctx.nodes)
    at = {n: i for i, n in enumerate(names)}
    g = ctx.graph
    io = [
        " ".join(_shape(g, t) for t in op.inputs if t)
        + " -> "
        + " ".join(_shape(g, t) for t in op.outputs if t)
        for op in (g.op(n) for n in names)
    ]
    return {
        "ops": [[n, g.op(n).op_type] for n in names],
        "edges": sorted([at[a], at[b]] for a in names for b in ctx.succ[a]),
        "shapes": io,
    }


def _op_rows(graph: Mapping[str, Any]) -> list[Rows]:
    shapes = graph.get("shapes") or []
    rows = []
    for i, (name, op_type) in enumerate(graph["ops"]):
        row = [("op", str(name)), ("type", str(op_type))]
        if i < len(shapes):
            ins, _, outs = str(shapes[i]).partition(" -> ")
            row += [("inputs", ins or "-"), ("outputs", outs or "-")]
        rows.append(row)
    return rows


def _us(value: object) -> str:
    return f"{value:.2f} us" if isinstance(value, int | float) else "-"


def _kernel_rows(k: int, plan: FusionPlan, row: Mapping[str, Any]) -> Rows:
    g = plan.groups[k]
    return [
        ("kernel", f"{k} ({g.kind}, {len(g.ops)} ops)"),
        ("name", g.name or "-"),
        ("tiles", g.config.short() if g.config else "-"),
        ("bound", str(row.get("bound", "-"))),
        (f"predicted ({plan.cost_model or 'model'})", _us(row.get("predicted_us"))),
        ("simulated", _us(row.get("simulated_us"))),
        ("its ops unfused (predicted)", _us(row.get("unfused_predicted_us"))),
    ]


def _fill(op_type: str) -> str:
    return "#dde8f5" if op_type in CUBE_TYPES else "#ffffff"


def fused_view(plan: FusionPlan) -> View | None:
    """The plan's graph: a cluster around each fused group, its border coloured by what
    bounds the kernel; edges inside a kernel stay on chip, the others go through memory.
    None for a plan written before graphs were recorded."""
    graph = plan.meta.get("graph")
    if not graph:
        return None
    names = [str(n) for n, _ in graph["ops"]]
    at = {n: i for i, n in enumerate(names)}
    kernel = {n: k for k, g in enumerate(plan.groups) for n in g.ops}
    rows = plan.meta.get("kernels") or []
    clusters, cluster_rows = [], []
    for k, g in enumerate(plan.groups):
        members = tuple(at[n] for n in g.ops if n in at)
        if len(members) < 2:
            continue
        row = rows[k] if k < len(rows) else {}
        line = colour(str(row.get("bound", "")))
        label = f"kernel {k}: {g.kind}, {_us(row.get('predicted_us') or row.get('simulated_us'))}"
        clusters.append(Cluster(members, label, fill="#fff6e8", line=line))
        cluster_rows.append(_kernel_rows(k, plan, row))
    edges = [(int(a), int(b)) for a, b in graph["edges"]]
    inside = [kernel.get(names[a], -1) == kernel.get(names[b], -2) for a, b in edges]
    edge_rows = [
        [
            ("from", names[a]),
            ("to", names[b]),
            ("data", f"inside kernel {kernel[names[a]]}: on chip" if on else "through memory"),
        ]
        for (a, b), on in zip(edges, inside, strict=True)
    ]
    ops = [(n, str(t)) for n, t in graph["ops"]]
    op_rows = _op_rows(graph)
    for i, n in enumerate(names):
        if n in kernel:
            op_rows[i] += _kernel_rows(
                kernel[n], plan, rows[kernel[n]] if kernel[n] < len(rows) else {}
            )
    legend = [(c, f"{name}-bound kernel") for name, c in BOUND_COLOURS.items()]
    legend += [("#333333", "edge inside a kernel (on chip)"), (_fill("MatMul"), "cube op")]
    fused = len(clusters)
    return View(
        Drawing(
            ops,
            edges,
            ["#333333" if on else "#b0b0b0" for on in inside],
            [_fill(t) for _, t in ops],
            clusters,
        ),
        op_rows,
        edge_rows,
        cluster_rows,
        legend,
        f"{len(names)} ops in {len(plan.groups)} kernels, {fused} of them fused (a box each)",
    )


def _verdicts(
    names: Sequence[str], edges: Sequence[tuple[int, int]], candidates: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """Each edge's verdict and why: the first candidate group holding both its ends, or
    ``no rule`` (candidate groups may overlap: a rule's and the largest)."""
    held: dict[str, set[int]] = {}
    for k, c in enumerate(candidates):
        for n in c["ops"]:
            held.setdefault(str(n), set()).add(k)
    out = []
    for a, b in edges:
        both = held.get(names[a], set()) & held.get(names[b], set())
        if both:
            c = candidates[min(both)]
            out.append((str(c["verdict"]), f"{c['rule']}: {c['reason']}"))
        else:
            out.append(("no rule", "no candidate group holds both ends"))
    return out


def candidates_view(graph: Graph, candidates: Sequence[Mapping[str, Any]]) -> View:
    """The graph before tuning: each data edge coloured by the verdict of the candidate group
    that holds both its ends; an op's panel lists the candidate groups it is in."""
    kg = kernel_graph(FusionContext(graph))
    names = [str(n) for n, _ in kg["ops"]]
    edges = [(int(a), int(b)) for a, b in kg["edges"]]
    verdicts = _verdicts(names, edges, candidates)
    op_rows = _op_rows(kg)
    at = {n: i for i, n in enumerate(names)}
    for c in candidates:
        for n in c["ops"]:
            if str(n) in at:
                op_rows[at[str(n)]].append((f"candidate ({c['rule']})", str(c["verdict"])))
    edge_rows = [
        [("from", names[a]), ("to", names[b]), ("verdict", v), ("why", why)]
        for (a, b), (v, why) in zip(edges, verdicts, strict=True)
    ]
    colours = [VERDICT_COLOURS.get(v, "#bcbd22") for v, _ in verdicts]
    fused = sum(1 for c in candidates if str(c["verdict"]) == "fuse")
    return View(
        Drawing(
            [(n, str(t)) for n, t in kg["ops"]], edges, colours, [_fill(t) for _, t in kg["ops"]]
        ),
        op_rows,
        edge_rows,
        [],
        [(c, v) for v, c in VERDICT_COLOURS.items()],
        f"{len(names)} kernels unfused, {len(candidates)} candidate groups, {fused} worth "
        "fusing; an edge's colour is the verdict of the group holding it",
    )
