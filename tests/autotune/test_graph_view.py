"""The graph views: a layered layout where every edge goes forward, and the candidates view
whose every edge carries the verdict of the candidate holding both its ends."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autotune.candidates import analyse_candidates
from autotune.graph_view import VERDICT_COLOURS, candidates_graph, kernel_graph, layered
from autotune.zoo import build
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext


@st.composite
def dags(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    n = draw(st.integers(1, 30))
    pairs = [(a, b) for b in range(n) for a in range(b)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=60)) if pairs else []
    return n, edges


@given(dags())
def test_every_edge_goes_to_a_later_layer_and_no_two_ops_share_a_place(dag) -> None:
    n, edges = dag
    pos = layered(n, edges)
    assert all(pos[b][0] > pos[a][0] for a, b in edges)
    assert len(set(pos)) == n
    # a layer is the longest path: an op past layer 0 has a producer one layer before it
    for b in range(n):
        if pos[b][0] > 0:
            assert any(pos[a][0] == pos[b][0] - 1 for a, bb in edges if bb == b)


def test_each_edge_carries_its_candidates_verdict() -> None:
    """An edge drawn with a verdict lies inside a candidate group of that verdict; an edge
    drawn as ``no rule`` lies inside none (candidate groups may overlap)."""
    graph = load_graph(build("bert-base", weights="inputs", layers=1, scale=0.25))
    found = analyse_candidates(graph, load_target("ascend910b"))["candidates"]
    kg = kernel_graph(FusionContext(graph))
    fig = candidates_graph(kg["ops"], kg["edges"], found)
    drawn = {d.name: d for d in fig.data if d.name in VERDICT_COLOURS}
    assert "fuse" in drawn and "no rule" in drawn
    assert sum(len(d.x) for d in drawn.values()) == 4 * len(kg["edges"])  # 3 points, a break
    for name, d in drawn.items():
        for text in d.text[::4]:
            a, b = text.split("<br>")[0].split(" -> ")
            holders = [c for c in found if a in c["ops"] and b in c["ops"]]
            if name == "no rule":
                assert not holders, text
            else:
                assert any(str(c["verdict"]) == name for c in holders), text


def test_candidates_html_is_one_page_of_the_graph(tmp_path) -> None:
    import re

    from typer.testing import CliRunner

    from autotune.cli import app

    page = tmp_path / "cand.html"
    res = CliRunner().invoke(
        app,
        ["candidates", "zoo:bert-base", "--layers", "1", "--scale", "0.25", "--html", str(page)],
    )
    assert res.exit_code == 0, res.output
    text = page.read_text()
    assert "fig-candidates" in text and not re.search(r"<script[^>]+src=", text)
    assert '"name":"fuse"' in text.replace(" ", "")


def test_repeated_layers_are_drawn_once_with_their_count(tmp_path) -> None:
    """bert-base with 4 layers: the ops of later layers fold onto the same ops of an earlier
    one, whose hover says how many layers it stands for; a pattern seen twice is not folded."""
    from autotune.graph_view import fused_graph, repeats
    from autotune.tuner import TuneConfig, tune_graph
    from search_space.rules import Policy

    graph = load_graph(build("bert-base", weights="inputs", layers=4, scale=0.25))
    config = TuneConfig(
        trials=2, cost="analytic", polish=0, storage=str(tmp_path / "s.journal"),
        policy=Policy(safe_mode=False),
    )  # fmt: skip
    plan = tune_graph(graph, config, name="bert").plan
    ops = plan.meta["graph"]["ops"]
    fig = fused_graph(plan)
    (markers,) = [d for d in fig.data if d.mode == "markers"]
    per_layer = [n for n, _ in ops if "layer.0/" in n]
    assert len(markers.x) < len(ops)
    # ops at the layers' edges read a different neighbour in the first layer (the embeddings)
    assert sum("x4 layers" in t for t in markers.text) >= 0.8 * len(per_layer)
    assert not any("layer.2/" in t.split(" (")[0] for t in markers.text)  # interior: folded
    assert repeats(["a", "b", "a"], [0, 1, 2]) == ([0, 1, 2], [1, 1, 1])  # twice: chance
