"""``autotune report PLAN --html``: one self-contained HTML page (plotly inlined, no network)
of a plan: the study's history against the baselines, the parameters' importances, each
kernel's latency before and after by what bounds it, the kernels on the roofline, each fused
kernel's buffers against their capacity, and the fused graph (laid out by Graphviz's dot, a
box around each fused group: :mod:`autotune.graph_page`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import optuna
import plotly.graph_objects as go

from autotune.graph_view import BOUND_COLOURS, colour, fused_view
from autotune.parity import label as _label
from autotune.parity import parity
from autotune.plotly_js import check_mode, include, write_bundle
from autotune.safe_text import html_text
from costmodel.spec import HardwareSpec
from search_space.space import FusionPlan

__all__ = ["BOUND_COLOURS", "figures", "page", "write_page"]

BUFFERS = ("l1", "l0a", "l0b", "l0c", "ub")


def history(study: optuna.Study, plan: FusionPlan) -> go.Figure:
    """Each trial's predicted latency and the best so far, with the baselines as lines."""
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    xs = [t.number for t in done]
    ys = [t.values[0] for t in done]
    best = [min(ys[: i + 1]) for i in range(len(ys))]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=ys, mode="markers", name="trial (predicted)")
    fig.add_scatter(x=xs, y=best, mode="lines", name="best so far", line={"shape": "hv"})
    lines = dict(plan.meta.get("baseline_simulated_us", {}))
    if plan.measured_us:
        lines["saved plan"] = plan.measured_us
    for name, us in lines.items():
        if isinstance(us, int | float) and math.isfinite(us):
            fig.add_hline(y=us, line_dash="dash", annotation_text=f"{name} (simulated)")
    fig.update_layout(title="Optimisation history", xaxis_title="trial", yaxis_title="us")
    return fig


def importances(study: optuna.Study) -> go.Figure | None:
    """The fusion decisions every trial has, ranked by Optuna's importance (the bilevel
    ``config/...`` parameters come and go with the groups, so they cannot be ranked)."""
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if len(done) < 2:
        return None
    shared = set.intersection(*(set(t.params) for t in done))
    params = sorted(p for p in shared if p.startswith("fuse/"))
    if not params:
        return None
    try:
        ranked = optuna.importance.get_param_importances(study, params=params)
    except (RuntimeError, ValueError):  # e.g. every trial the same value
        return None
    top = list(ranked.items())[:20][::-1]
    fig = go.Figure(go.Bar(x=[v for _, v in top], y=[k for k, _ in top], orientation="h"))
    fig.update_layout(title="Importance of the fusion decisions", xaxis_title="importance")
    return fig


def _rows(n: int) -> int:
    """The height of a plot with a row per kernel, each row readable."""
    return max(360, 140 + 22 * n)


def _names(plan: FusionPlan, groups: Sequence[int]) -> list[str]:
    """Each kernel's label on a plot's axis: its number and first op (+ how many more)."""
    return [f"k{k} {plan.groups[k].name or _label(plan.groups[k].ops)}" for k in groups]


def kernel_bars(plan: FusionPlan) -> go.Figure:
    """Per kernel, a row: what its ops cost unfused and what the kernel costs, coloured by
    what bounds it."""
    rows = plan.meta.get("kernels") or []
    names = _names(plan, range(len(plan.groups)))
    fig = go.Figure()
    fig.add_bar(
        y=names,
        x=[r.get("unfused_predicted_us") for r in rows],
        orientation="h",
        name="ops unfused (predicted)",
        marker_color="#c7c7c7",
    )
    fig.add_bar(
        y=names,
        x=[r.get("simulated_us") for r in rows],
        orientation="h",
        name="kernel (simulated)",
        marker_color=[colour(str(r.get("bound", ""))) for r in rows],
        customdata=[str(r.get("bound", "")) for r in rows],
        hovertemplate="%{y}<br>%{x:.2f} us, %{customdata}-bound<extra></extra>",
    )
    fig.update_layout(
        title="Kernels before and after (colour: what bounds the kernel)",
        barmode="group",
        xaxis={"title": "us (simulated)", "side": "top"},
        yaxis={"autorange": "reversed", "automargin": True, "tickfont": {"size": 10}},
        height=_rows(len(names)),
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"},
    )
    return fig


def roofline(plan: FusionPlan, spec: HardwareSpec) -> go.Figure | None:
    """The kernels by arithmetic intensity (FLOPs per HBM byte) and achieved FLOP rate, each
    coloured by what bounds it, under the cube peak and two roofs: HBM, and L2 (every cube
    core's L2 read path: a kernel whose data stay in L2 may pass the HBM roof)."""
    rows = plan.meta.get("kernels") or []
    pts = [
        (r["flops"] / r["hbm_bytes"], r["flops"] / (r["simulated_us"] * 1e-6), _label(g.ops), r)
        for g, r in zip(plan.groups, rows, strict=False)
        if r.get("flops") and r.get("hbm_bytes") and r.get("simulated_us")
    ]
    if not pts:
        return None
    lo = min(p[0] for p in pts) / 4
    hi = max(p[0] for p in pts) * 4
    fig = go.Figure()
    roofs = (
        ("HBM", spec.hbm_peak_bytes_per_s, "black", "solid"),
        ("L2", spec.l2_read_bytes_per_cycle * spec.clock_hz * spec.cube_cores, "#9467bd", "dash"),
    )
    for name, bw, hue, dash in roofs:
        ridge = min(max(spec.cube_peak_flops / bw, lo), hi)
        fig.add_scatter(
            x=[lo, ridge, hi],
            y=[min(spec.cube_peak_flops, x * bw) for x in (lo, ridge, hi)],
            mode="lines",
            name=f"roof: {name} {bw / 1e12:.1f} TB/s, cube peak",
            line={"color": hue, "dash": dash},
        )
    for bound in sorted({str(p[3].get("bound", "")) for p in pts}):
        mine = [p for p in pts if str(p[3].get("bound", "")) == bound]
        fig.add_scatter(
            x=[p[0] for p in mine],
            y=[p[1] for p in mine],
            mode="markers",
            name=f"{bound or 'unknown'}-bound kernel",
            text=[p[2] for p in mine],
            marker={"color": colour(bound), "size": 9},
            hovertemplate="%{text}<br>%{x:.2f} FLOP/B, %{y:.3g} FLOP/s<extra></extra>",
        )
    fig.update_xaxes(type="log", title="FLOPs per HBM byte")
    fig.update_yaxes(type="log", title="FLOP/s")
    fig.update_layout(title=f"Roofline ({spec.name})")
    return fig


def occupancy(plan: FusionPlan, spec: HardwareSpec) -> go.Figure | None:
    """Each fused kernel's bytes per on-chip buffer as a share of that buffer's capacity: a
    row per kernel, a column per buffer."""
    rows = plan.meta.get("kernels") or []
    fused = [k for k, g in enumerate(plan.groups) if len(g.ops) > 1 and k < len(rows)]
    if not fused:
        return None
    caps = [float(getattr(spec, f"{buf}_bytes")) for buf in BUFFERS]
    used = [[float(rows[k].get("footprint", {}).get(b, 0)) for b in BUFFERS] for k in fused]
    fig = go.Figure(
        go.Heatmap(
            z=[[100.0 * u / c for u, c in zip(row, caps, strict=True)] for row in used],
            x=[b.upper() for b in BUFFERS],
            y=_names(plan, fused),
            customdata=used,
            zmin=0,
            zmax=100,
            colorscale="YlOrRd",
            colorbar={"title": "% of capacity"},
            texttemplate="%{z:.0f}",
            hovertemplate="%{y}<br>%{x}: %{customdata:,.0f} B, %{z:.1f}% of it<extra></extra>",
        )
    )
    fig.update_layout(
        title="Buffers of each fused kernel (% of each buffer's capacity)",
        xaxis={"side": "top"},
        yaxis={"autorange": "reversed", "automargin": True, "tickfont": {"size": 10}},
        height=_rows(len(fused)),
    )
    return fig


Section = tuple[str, go.Figure | str | None, str]  # id, plot or HTML or None, why missing
# the page's sections, in order (``report --html`` counts them as they are drawn)
SECTIONS = ("history", "importances", "kernels", "parity", "roofline", "buffers", "graph")


def figures(
    plan: FusionPlan,
    spec: HardwareSpec,
    study: optuna.Study | None,
    step: Callable[[str], None] | None = None,
) -> list[Section]:
    """Every section of the page: (id, figure, HTML or None, why it is missing)."""
    tell = step or (lambda _: None)
    out: list[Section] = []
    no_study = "give --storage (and --study) to plot the study"
    tell("history")
    out.append(("history", history(study, plan) if study else None, no_study))
    tell("importances")
    out.append(("importances", importances(study) if study else None, no_study))
    tell("kernels")
    out.append(("kernels", kernel_bars(plan), ""))
    tell("parity")
    out.append(("parity", parity(plan), "plan written before per-kernel predictions were kept"))
    tell("roofline")
    out.append(("roofline", roofline(plan, spec), "no kernel FLOPs in this plan"))
    tell("buffers")
    out.append(("buffers", occupancy(plan, spec), "no fused kernel"))
    tell("graph")
    out.append(("graph", *graph_block(plan)))
    return out


def graph_block(plan: FusionPlan) -> tuple[str | None, str]:
    """The fused graph as a Graphviz view (:mod:`autotune.graph_page`), or None and why."""
    from autotune.graph_dot import INSTALL, have_dot
    from autotune.graph_page import block

    view = fused_view(plan)
    if view is None:
        return None, "plan written before graphs were recorded"
    if not have_dot():
        return None, f"Graphviz's dot draws the graph and is not installed: {INSTALL}"
    return block(view, "graph"), ""


def page(plan: FusionPlan, sections: list[Section], plotly: str = "inline") -> str:
    """The HTML page: plotly.js once (inline, or its script tag: :mod:`autotune.plotly_js`),
    then every section in order, the graph viewer's style and script once each."""
    from autotune.graph_page import script, style

    fused = sum(1 for g in plan.groups if len(g.ops) > 1)
    measured = f"{plan.measured_us:.1f} us simulated" if plan.measured_us else "not measured"
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html_text(plan.name or 'plan')}: fusion plan report</title>{style()}",
        "<style>html { overflow-y: scroll; }</style>",  # plotly sizes after the scroll bar
        "</head><body>",
        f"<h1>{html_text(plan.name or 'model')} on {html_text(plan.target)}</h1>",
        f"<p>{len(plan.groups)} kernels, {fused} fused; {measured}.</p>",
    ]
    first, drawn = True, False
    for key, fig, why in sections:
        parts.append(f"<section id='{key}'>")
        if fig is None:
            parts.append(f"<p class='missing'>{html_text(key)}: {html_text(why)}</p>")
        elif isinstance(fig, str):
            parts.append(f"<h2>Fused graph</h2>{fig}")
            drawn = True
        else:
            js = include(plotly, first)
            parts.append(fig.to_html(full_html=False, include_plotlyjs=js, div_id=f"fig-{key}"))
            first = False
        parts.append("</section>")
    if first and not drawn:  # no figure at all: still a page that loads nothing from the network
        parts.append("<p>nothing to plot</p>")
    parts.append(f"{script()}</body></html>")
    return "\n".join(parts)


def write_page(
    record: FusionPlan,
    plan: Path,
    path: Path,
    storage: str | None = None,
    study: str | None = None,
    step: Callable[[str], None] | None = None,
    plotly: str = "inline",
) -> Path:
    """Write the plan's page to ``path`` (atomically; never over the plan or the storage);
    with ``storage``, the study (``study``, or the one the plan names) is plotted too;
    ``plotly``: where the page gets plotly.js (:mod:`autotune.plotly_js`).

    Raises:
        AutotuneError: a storage or study that cannot be found.
    """
    from autotune.estimate import plan_target
    from autotune.exceptions import AutotuneError
    from autotune.tuner.study import journal_path, open_storage
    from search_space.atomic import atomic_write_text, output_path

    journal = journal_path(storage) if storage else None
    output_path(path, {"plan": plan, "--storage": journal})
    loaded = None
    if storage is not None:
        if journal is not None and not journal.is_file():
            raise AutotuneError(f"storage '{journal}' does not exist; give the study's storage")
        name = str(study or record.meta.get("study"))
        try:
            loaded = optuna.load_study(study_name=name, storage=open_storage(storage)[0])
        except KeyError:
            raise AutotuneError(
                f"storage '{storage}' has no study '{name}'; give --study NAME"
            ) from None
    sections = figures(record, plan_target(record).spec, loaded, step)
    write_bundle(check_mode(plotly), path)
    out = atomic_write_text(path, page(record, sections, plotly))
    if step is not None:
        step("written")
    return out
