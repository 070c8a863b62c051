"""The report page and the dashboard in a real headless Chromium (Debian's `chromium` and
`chromedriver`, installed by `make browser`; never downloaded): the plots draw, with one bar
per kernel and one box per fused group, the dashboard shows the study, no console errors;
screenshots go to build/test-artifacts (or $AUTOTUNE_TEST_ARTIFACTS)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_dashboard import _serve
from typer.testing import CliRunner

from autotune.cli import app

ARTIFACTS = Path(
    os.environ.get("AUTOTUNE_TEST_ARTIFACTS")
    or Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "Debian's chromium and chromium-driver: run `make browser`"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(service=Service(driver), options=opts)
    yield session
    session.quit()


def _until(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` until it gives a truthy value (the page renders asynchronously); a
    generous hang guard, not a time limit."""
    hang = time.monotonic() + 600
    while time.monotonic() < hang:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"never: {what}")


def _errors(browser: Any) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _load(browser: Any, url: str) -> None:
    """Open ``url`` with the log of the pages before drained: a dashboard page left open
    polls its server after it stopped, and those errors are not this page's."""
    browser.get("about:blank")
    browser.get_log("browser")
    browser.get(url)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study and its report page (safe mode off: the page and the dashboard show nothing of
    it, and it took a third of the study's time)."""
    folder = tmp_path_factory.mktemp("browser")
    runner = CliRunner()
    res = runner.invoke(
        app,
        ["tune", "zoo:bert-base", "--layers", "2", "--scale", "0.25", "--trials", "8",
         "--unsafe", "-o", str(folder / "plan.json"), "--storage", str(folder / "s.journal")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        app,
        ["report", str(folder / "plan.json"), "--html", str(folder / "report.html"),
         "--storage", str(folder / "s.journal")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return folder


def test_the_report_page_draws_every_kernel_and_group(browser: Any, tuned: Path) -> None:
    plan = json.loads((tuned / "plan.json").read_text())
    sum(1 for g in plan["groups"] if len(g["ops"]) > 1)
    _load(browser, (tuned / "report.html").as_uri())
    count = "return document.querySelectorAll(arguments[0]).length"
    _until(lambda: browser.execute_script(count, ".js-plotly-plot .main-svg") >= 7, "7 plots")
    bars = browser.execute_script(
        "return Array.from(document.querySelectorAll('#fig-kernels .trace.bars'))"
        ".map(t => t.querySelectorAll('.point').length)"
    )
    assert bars == [len(plan["groups"])] * 2  # unfused and fused, one bar per kernel each
    assert browser.execute_script(count, "#gv-graph g.cluster") == _boxes(plan)
    assert browser.execute_script(count, "#fig-history .scatterlayer .trace") == 2
    # the parity plot: a trace per kernel kind and the predicted = simulated line, a box each
    kinds = len({g["kind"] for g in plan["groups"]})
    assert browser.execute_script(count, "#fig-parity .scatterlayer .trace") == kinds + 1
    assert browser.execute_script(count, "#fig-parity .boxlayer .trace") == kinds
    assert _errors(browser) == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "report.png"))


def _boxes(plan: dict[str, Any]) -> int:
    """The fused groups the graph draws a box around: two ops or more of the kernel graph
    (views are not drawn)."""
    drawn = {n for n, _ in plan["meta"]["graph"]["ops"]}
    return sum(1 for g in plan["groups"] if len(drawn & set(g["ops"])) > 1)


def test_the_dashboard_shows_the_study_and_its_trials(browser: Any, tuned: Path) -> None:
    proc, base = _serve(tuned)
    try:
        _load(browser, base + "/dashboard")
        body = "return document.body.innerText"
        _until(lambda: ":measured" in browser.execute_script(body), "the study list")
        assert "bert-base" in browser.execute_script(body)
        browser.get(base + "/dashboard/studies/0")
        _until(lambda: "latency_us" in browser.execute_script(body), "the study's metric")
        assert _errors(browser) == []
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "dashboard.png"))
    finally:
        browser.get("about:blank")  # the dashboard stops polling before its server goes
        proc.terminate()
        proc.wait(600)


def test_the_full_bert_base_page_draws_its_graph(browser: Any, tmp_path: Path) -> None:
    """Full bert-base (12 layers, 370 ops): the page draws every plot, and the graph a box per
    fused group. Safe mode is off (as for ``tuned``): checking the full model's fused kernels
    against the float64 reference took 40 s of this test's minute."""
    runner = CliRunner()
    plan, page = tmp_path / "plan.json", tmp_path / "report.html"
    res = runner.invoke(
        app,
        ["tune", "zoo:bert-base", "--trials", "6", "--cost", "analytic", "--polish", "0",
         "--unsafe", "-o", str(plan), "--storage", str(tmp_path / "s.journal")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", str(plan), "--html", str(page)])
    assert res.exit_code == 0, res.output
    record = json.loads(plan.read_text())
    _load(browser, page.as_uri())
    count = "return document.querySelectorAll(arguments[0]).length"
    _until(lambda: browser.execute_script(count, ".js-plotly-plot .main-svg") >= 4, "the plots")
    _until(lambda: browser.execute_script(count, "#gv-graph[data-ready]"), "the graph")
    assert browser.execute_script(count, "#gv-graph g.node") == len(record["meta"]["graph"]["ops"])
    assert browser.execute_script(count, "#gv-graph g.cluster") == _boxes(record) > 12
    assert _errors(browser) == []
