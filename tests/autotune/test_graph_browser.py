"""The graph viewer in a real headless Chromium (``candidates --html`` of one bert-base
layer): every op and edge drawn, a click shows the op's details, the wheel zooms about the
pointer, a drag pans without selecting, the search box finds an op and brings it into view,
"whole graph" fits it. Screenshots go to build/test-artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from quick_study import MODEL, run
from test_browser import ARTIFACTS, _errors, _until, browser  # noqa: F401 (the fixture)

from autotune.graph_view import candidates_view
from search_space import load_graph
from search_space.zoo import build

ROOT = "#gv-candidates"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("graph") / "cand.html"
    res = run("candidates", *MODEL, "--html", str(out))
    assert res.exit_code == 0, res.stderr
    return out


@pytest.fixture
def opened(browser: Any, page: Path) -> Any:  # noqa: F811 (the fixture)
    browser.get(page.as_uri())
    _until(lambda: browser.execute_script(f"return document.querySelector('{ROOT}[data-ready]')"),
           "the viewer")  # fmt: skip
    return browser


def _js(b: Any, script: str, *args: Any) -> Any:
    return b.execute_script(script, *args)


def _view(b: Any) -> list[float]:
    box = _js(b, f"return document.querySelector('{ROOT} svg').getAttribute('viewBox')")
    return [float(v) for v in box.split()]


def test_every_op_and_edge_is_drawn_with_its_legend(opened: Any) -> None:
    from autotune.candidates import analyse_candidates
    from costmodel.spec import load_target

    graph = load_graph(build("bert-base", weights="inputs", layers=1, scale=0.25))
    view = candidates_view(
        graph, analyse_candidates(graph, load_target("ascend910b"))["candidates"]
    )
    count = "return document.querySelectorAll(arguments[0]).length"
    assert _js(opened, count, f"{ROOT} g.node") == len(view.drawing.ops)
    assert _js(opened, count, f"{ROOT} g.edge") == len(view.drawing.edges)
    assert _js(opened, count, f"{ROOT} .gv-legend span") == len(view.legend)
    assert _errors(opened) == []


def test_a_click_shows_the_ops_details(opened: Any) -> None:
    from selenium.webdriver.common.by import By

    name = _js(
        opened,
        f"return JSON.parse(document.querySelector('{ROOT} .gv-data').textContent).names.op3",
    )
    opened.find_element(By.CSS_SELECTOR, f"{ROOT} #op3").click()
    panel = _js(opened, f"return document.querySelector('{ROOT} .gv-panel').innerText")
    assert name in panel and "type" in panel and "outputs" in panel
    assert _js(opened, f"return document.querySelector('{ROOT}').dataset.selected") == "op3"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    opened.save_screenshot(str(ARTIFACTS / "graph-selected.png"))


def test_the_wheel_zooms_and_a_drag_pans_without_selecting(opened: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.common.by import By

    canvas = opened.find_element(By.CSS_SELECTOR, f"{ROOT} .gv-canvas")
    before = _view(opened)
    ActionChains(opened).scroll_from_origin(ScrollOrigin.from_element(canvas), 0, -300).perform()
    _until(lambda: _view(opened)[2] < before[2], "a zoom in")
    zoomed = _view(opened)
    ActionChains(opened).move_to_element(canvas).click_and_hold().move_by_offset(
        120, 80).release().perform()  # fmt: skip
    _until(lambda: _view(opened)[0] < zoomed[0], "a pan")
    panned = _view(opened)
    scale = zoomed[2] / _js(opened, f"return document.querySelector('{ROOT} svg').clientWidth")
    assert panned[0] == pytest.approx(zoomed[0] - 120 * scale, rel=0.05, abs=2)
    assert panned[1] == pytest.approx(zoomed[1] - 80 * scale, rel=0.05, abs=2)
    assert panned[2] == pytest.approx(zoomed[2])  # a pan keeps the zoom
    assert _js(opened, f"return document.querySelector('{ROOT}').dataset.selected") is None


def test_the_search_box_finds_an_op_and_brings_it_into_view(opened: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    find = opened.find_element(By.CSS_SELECTOR, f"{ROOT} .gv-find")
    find.send_keys("output/LayerNorm", Keys.ENTER)
    hit = _until(lambda: _js(opened, f"return document.querySelector('{ROOT}').dataset.selected"),
                 "a hit")  # fmt: skip
    assert "output/LayerNorm" in _js(
        opened, f"return document.querySelector('{ROOT} .gv-panel').innerText"
    )
    inside = (
        "const a = document.getElementById(arguments[0]).getBoundingClientRect();"
        f"const b = document.querySelector('{ROOT} .gv-canvas').getBoundingClientRect();"
        "return a.left >= b.left && a.right <= b.right && a.top >= b.top && a.bottom <= b.bottom"
    )
    assert _js(opened, inside, hit)


def test_whole_graph_fits_it_in_the_canvas(opened: Any) -> None:
    from selenium.webdriver.common.by import By

    opened.find_element(By.CSS_SELECTOR, f"{ROOT} .gv-fit").click()
    fits = (
        f"const a = document.querySelector('{ROOT} svg g.graph').getBoundingClientRect();"
        f"const b = document.querySelector('{ROOT} .gv-canvas').getBoundingClientRect();"
        "return a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1"
        " && a.bottom <= b.bottom + 1"
    )
    assert _js(opened, fits)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    opened.save_screenshot(str(ARTIFACTS / "graph-whole.png"))
