"""The graph views, laid out by Graphviz's ``dot`` (Debian's graphviz, installed by `make
graphviz`): the SVG is well-formed XML with one element per op, edge and cluster; every edge
points down; a cluster holds its ops and no other, and no two clusters overlap; any name
survives the trip; the fused view's clusters are the plan's fused groups and its shapes are
what ONNX's own shape inference gives; the candidates view's edges carry their verdicts."""

from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ET

import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.candidates import analyse_candidates
from autotune.graph_dot import Cluster, Drawing, dot_source, render_svg
from autotune.graph_page import block
from autotune.graph_view import VERDICT_COLOURS, candidates_view, fused_view
from costmodel.spec import load_target
from search_space import load_graph
from search_space.zoo import build

SVG = "{http://www.w3.org/2000/svg}"
Box = tuple[float, float, float, float]  # x0, y0, x1, y1 (y grows downwards)


def boxes(svg: str) -> dict[str, Box]:
    """Each element's id -> the bounding box of its outline (a node's or cluster's first
    shape), read from the SVG as XML (which also checks that it is well formed)."""
    out = {}
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if g.get("class") not in ("node", "cluster"):
            continue
        shape = next(c for c in g if c.tag in (f"{SVG}path", f"{SVG}polygon"))
        text = shape.get("d") or shape.get("points") or ""
        pts = [(float(x), float(y)) for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", text)]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        out[str(g.get("id"))] = (min(xs), min(ys), max(xs), max(ys))
    return out


def inside(a: Box, b: Box) -> bool:
    return b[0] <= a[0] and b[1] <= a[1] and a[2] <= b[2] and a[3] <= b[3]


def overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@st.composite
def drawings(draw: st.DrawFn) -> Drawing:
    """A DAG (ops numbered producers first) and clusters over runs of consecutive ops, as
    fused groups are."""
    n = draw(st.integers(1, 24))
    pairs = [(a, b) for b in range(n) for a in range(b)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=40)) if pairs else []
    cuts = sorted(draw(st.sets(st.integers(1, n), max_size=6)) | {0, n})
    runs = [tuple(range(a, b)) for a, b in itertools.pairwise(cuts)]
    fused = [r for r in runs if len(r) > 1 and draw(st.booleans())]
    names = st.text(min_size=1, max_size=40)
    ops = [(draw(names), draw(st.sampled_from(["MatMul", "Add", "Softmax"]))) for _ in range(n)]
    return Drawing(ops, edges, clusters=[Cluster(r, f"kernel {i}") for i, r in enumerate(fused)])


@given(drawings())
def test_the_layout_flows_down_and_clusters_hold_their_ops_alone(d: Drawing) -> None:
    got = boxes(render_svg(dot_source(d)))
    assert {f"op{i}" for i in range(len(d.ops))} <= set(got)
    for a, b in d.edges:  # top-down: a producer's box ends above its consumer's
        assert got[f"op{a}"][3] < got[f"op{b}"][1] + 1e-6
    clusters = [got[f"k{k}"] for k in range(len(d.clusters))]
    for k, c in enumerate(d.clusters):
        for i in range(len(d.ops)):
            assert inside(got[f"op{i}"], clusters[k]) == (i in c.members)
        assert not any(overlap(clusters[k], other) for other in clusters[k + 1 :])


@given(drawings())
def test_any_name_survives_dot_and_the_page(d: Drawing) -> None:
    """Quotes, backslashes, markup, newlines: the page's data gives back every name as it was,
    and no name can close the data's script element."""
    from autotune.graph_view import View

    view = View(d, [[("op", n)] for n, _ in d.ops], [], [], [], "a caption")
    page = block(view, "g")
    data = re.search(r"<script type='application/json' class='gv-data'>(.*?)</script>", page, re.S)
    assert data is not None
    names = json.loads(data.group(1))["names"]
    assert [names[f"op{i}"] for i in range(len(d.ops))] == [n for n, _ in d.ops]


def test_a_cluster_that_shares_an_op_is_refused() -> None:
    with pytest.raises(ValueError, match="shared"):
        dot_source(Drawing([("a", "Add"), ("b", "Add")], [(0, 1)], clusters=[
            Cluster((0, 1), "one"), Cluster((1,), "two")]))  # fmt: skip


def _model(layers: int = 1) -> onnx.ModelProto:
    return build("bert-base", weights="inputs", layers=layers, scale=0.25)


def test_each_edge_carries_its_candidates_verdict() -> None:
    """An edge drawn with a verdict's colour lies inside a candidate group of that verdict;
    an edge drawn as ``no rule`` lies inside none (candidate groups may overlap)."""
    graph = load_graph(_model())
    found = analyse_candidates(graph, load_target("ascend910b"))["candidates"]
    view = candidates_view(graph, found)
    names = [n for n, _ in view.drawing.ops]
    by_colour = {c: v for v, c in VERDICT_COLOURS.items()}
    seen = set()
    for (a, b), paint, rows in zip(
        view.drawing.edges, view.drawing.edge_colours, view.edges, strict=True
    ):
        verdict = by_colour[paint]
        assert dict(rows)["verdict"] == verdict
        holders = [c for c in found if names[a] in c["ops"] and names[b] in c["ops"]]
        assert (
            (not holders) if verdict == "no rule" else verdict in {c["verdict"] for c in holders}
        )
        seen.add(verdict)
    assert {"fuse", "no rule"} <= seen


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory):
    from autotune.tuner import TuneConfig, tune_graph
    from search_space.rules import Policy

    config = TuneConfig(
        trials=2, cost="analytic", polish=0, policy=Policy(safe_mode=False),
        storage=str(tmp_path_factory.mktemp("graph") / "s.journal"),
    )  # fmt: skip
    return tune_graph(load_graph(_model(2)), config, name="bert").plan


def test_the_fused_views_clusters_are_the_plans_fused_groups(plan) -> None:
    view = fused_view(plan)
    assert view is not None
    names = [n for n, _ in view.drawing.ops]
    drawn = [tuple(sorted(set(g.ops) & set(names))) for g in plan.groups]  # views are not ops
    fused = [ops for ops in drawn if len(ops) > 1]
    assert len(fused) > 5
    assert sorted(tuple(sorted(names[i] for i in c.members)) for c in view.drawing.clusters) == (
        sorted(fused)
    )
    kernel = {n: k for k, g in enumerate(plan.groups) for n in g.ops}
    for (a, b), rows in zip(view.drawing.edges, view.edges, strict=True):
        on_chip = kernel[names[a]] == kernel[names[b]]
        assert ("on chip" in dict(rows)["data"]) == on_chip
    got = boxes(render_svg(dot_source(view.drawing)))
    for k in range(len(fused)):
        for j in range(k + 1, len(fused)):
            assert not overlap(got[f"k{k}"], got[f"k{j}"])


def test_an_ops_shapes_are_what_onnx_infers(plan) -> None:
    """The panel's output shapes, against ONNX's shape inference of the same model."""
    inferred = onnx.shape_inference.infer_shapes(_model(2)).graph
    dims = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*inferred.value_info, *inferred.output)
    }
    outputs = {n.name: n.output for n in inferred.node}
    view = fused_view(plan)
    assert view is not None
    checked = 0
    for rows in view.ops:
        row = dict(rows)
        shown = re.findall(r"\[([\d,]*)\]", row["outputs"])
        want = [dims.get(t) for t in outputs[row["op"]]]
        if None in want:
            continue
        assert [[int(x) for x in s.split(",") if x] for s in shown] == want, row["op"]
        checked += 1
    assert checked > 0.8 * len(view.ops)


def test_candidates_html_is_one_offline_page_without_plotly(tmp_path) -> None:
    from quick_study import MODEL, run

    page = tmp_path / "cand.html"
    res = run("candidates", *MODEL, "--html", str(page))
    assert res.exit_code == 0, res.stderr
    text = page.read_text()
    assert "class='gv'" in text and "<svg" in text
    assert not re.search(r"<script[^>]+src=", text) and "plotly" not in text.lower()


def test_without_dot_candidates_html_is_one_line_and_no_page(tmp_path, monkeypatch) -> None:
    from quick_study import MODEL, run

    monkeypatch.setenv("PATH", str(tmp_path))  # no dot here (nor anything else)
    page = tmp_path / "cand.html"
    res = run("candidates", *MODEL, "--html", str(page))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 1 and len(lines) == 1 and "graphviz" in lines[0].lower()
    assert not page.exists()
