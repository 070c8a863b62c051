"""Trust at a glance (issue 46, item 4): each kernel's latency as the study's cost model
predicted it against the simulator's, and each kernel kind's log residuals; drawn in
``report --html`` and on the study's page of optuna-dashboard."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from search_space.space import FusionPlan

__all__ = ["label", "parity"]


def label(ops: Sequence[str]) -> str:
    """A kernel by its ops: the first op, ``+N`` for the others."""
    return ops[0].lstrip("/") + (f" +{len(ops) - 1}" if len(ops) > 1 else "")


def parity(plan: FusionPlan) -> go.Figure | None:
    """Each kernel's predicted latency (the study's cost model) against its simulated one,
    coloured by kind, with the line where they agree; beside it, each kind's log residuals
    ln(predicted / simulated): where the model a plan was chosen by errs, and which way."""
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    rows = plan.meta.get("kernels") or []
    pairs = [
        (g, r["predicted_us"], r["simulated_us"])
        for g, r in zip(plan.groups, rows, strict=False)
        if r.get("predicted_us") and r.get("simulated_us")
    ]
    if not pairs:
        return None
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.6, 0.4],
        subplot_titles=("predicted against simulated (us)", "ln(predicted / simulated) by kind"),
    )
    palette = qualitative.Plotly
    for n, kind in enumerate(sorted({g.kind for g, _, _ in pairs})):
        mine = [(g, p, m) for g, p, m in pairs if g.kind == kind]
        hue = palette[n % len(palette)]  # one colour per kind in both panels
        fig.add_scatter(
            x=[m for _, _, m in mine],
            y=[p for _, p, _ in mine],
            mode="markers",
            name=kind,
            legendgroup=kind,
            marker_color=hue,
            text=[g.name or label(g.ops) for g, _, _ in mine],
            row=1,
            col=1,
            hovertemplate="%{text}<br>simulated %{x:.2f} us, predicted %{y:.2f} us<extra></extra>",
        )
        fig.add_box(
            y=[math.log(p / m) for _, p, m in mine],
            name=kind,
            legendgroup=kind,
            showlegend=False,
            marker_color=hue,
            boxpoints="all",
            row=1,
            col=2,
        )
    top = max(max(p, m) for _, p, m in pairs)
    fig.add_scatter(
        x=[0, top],
        y=[0, top],
        mode="lines",
        name="predicted = simulated",
        line={"dash": "dot", "color": "#888"},
        row=1,
        col=1,
    )
    fig.update_xaxes(title_text="simulated us", row=1, col=1)
    fig.update_yaxes(title_text="predicted us", row=1, col=1)
    fig.update_layout(title=f"Trust: the {plan.cost_model or 'cost'} model against the simulator")
    return fig
