"""How long a graph view takes to draw (issue 46, item 6: a 1,000-op graph in under 2 s): the
candidates view of zoo models from 185 to 1,705 ops, median of ``--runs`` runs each:

* ``view_s``: the view itself (the kernel graph, each edge's verdict, the panel's rows);
* ``dot_s``: Graphviz's ``dot`` laying it out as SVG (``dot -Tsvg``);
* ``browser_s``: headless Chromium (Debian's) opening the page until the viewer is ready;
* ``total_s``: the three together, what a user waits from the view to a drawn graph.

The candidate analysis before it (the cost model on every group) is not counted: it is the
command's work, not the drawing's.

    cd experiments && ../.venv/bin/python bench_graph.py [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _table import RESULTS, emit

from autotune.candidates import analyse_candidates
from autotune.graph_dot import dot_source, render_svg
from autotune.graph_page import block, page
from autotune.graph_view import candidates_view
from costmodel.spec import load_target
from search_space import load_graph
from search_space.zoo import build

MODELS = ("mobilenetv3", "bert-base", "gpt2", "llama3-8b", "llama3-8b-decode")


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(shutil.which("chromium"))
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=opts)


def _open(browser: Any, path: Path) -> float:
    start = time.perf_counter()
    browser.get(path.as_uri())  # returns once the page (and its script) has loaded
    while not browser.execute_script("return document.querySelector('.gv[data-ready]')"):
        time.sleep(0.01)
    return time.perf_counter() - start


def measure(model: str, runs: int, browser: Any, folder: Path) -> dict[str, object]:
    graph = load_graph(build(model, weights="inputs"))
    found = analyse_candidates(graph, load_target("ascend910b"))["candidates"]
    times: dict[str, list[float]] = {"view_s": [], "dot_s": [], "browser_s": []}
    for _ in range(runs):
        start = time.perf_counter()
        view = candidates_view(graph, found)
        times["view_s"].append(time.perf_counter() - start)
        start = time.perf_counter()
        render_svg(dot_source(view.drawing))
        times["dot_s"].append(time.perf_counter() - start)
        html = folder / f"{model}.html"
        html.write_text(page(model, model, block(view, "candidates")))
        times["browser_s"].append(_open(browser, html))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "model": model,
        "ops": len(view.drawing.ops),
        "edges": len(view.drawing.edges),
        **{k: f"{v:.3f}" for k, v in med.items()},
        "total_s": f"{sum(med.values()):.3f}",
        "page_MB": f"{html.stat().st_size / 1e6:.2f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    browser = _browser()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [measure(m, args.runs, browser, Path(tmp)) for m in MODELS]
    finally:
        browser.quit()
    emit(rows, RESULTS / "bench_graph.csv")


if __name__ == "__main__":
    main()
