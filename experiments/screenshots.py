"""The README's three pictures: the report page, its fused graph with one op clicked, and
the dashboard of a fresh bert-base study, taken in headless Chromium (Debian's, `make browser`;
the graph needs Graphviz, `make graphviz`).

    cd experiments && ../.venv/bin/python screenshots.py  # -> docs/images/*.png

What it runs is what a user runs:

    autotune tune zoo:bert-base --trials 24 -o plan.json
    autotune report plan.json --html report.html --storage autotune.journal
    autotune dashboard
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
CLI = [sys.executable, "-m", "autotune"]


def _browser() -> webdriver.Chrome:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        sys.exit("needs Debian's chromium and chromium-driver: run `make browser`")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=opts)


def _wait(browser: webdriver.Chrome, script: str) -> None:
    for _ in range(600):
        if browser.execute_script(script):
            time.sleep(1.0)  # let the last plot settle
            return
        time.sleep(0.1)
    raise SystemExit(f"the page never got there: {script}")


def _graph(browser: webdriver.Chrome) -> None:
    """The fused graph, scrolled into view, the search box's hit (an FFN matmul) selected."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _wait(browser, "return document.querySelector('#gv-graph[data-ready]')")
    browser.execute_script("document.getElementById('graph').scrollIntoView()")
    find = browser.find_element(By.CSS_SELECTOR, "#gv-graph .gv-find")
    find.send_keys("layer.3/intermediate/dense/MatMul", Keys.ENTER)
    _wait(browser, "return document.querySelector('#gv-graph').dataset.selected")
    browser.save_screenshot(str(IMAGES / "graph.png"))


def main() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        run = {"cwd": tmp, "check": True, "stdout": subprocess.DEVNULL}
        subprocess.run([*CLI, "tune", "zoo:bert-base", "--trials", "24", "-o", "plan.json"], **run)
        subprocess.run(
            [*CLI, "report", "plan.json", "--html", "report.html", "--storage",
             "autotune.journal"], **run,
        )  # fmt: skip
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = subprocess.Popen(
            [*CLI, "dashboard", "--port", str(port)], cwd=tmp, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        browser = _browser()
        try:
            browser.get((Path(tmp) / "report.html").as_uri())
            _wait(browser, "return document.querySelectorAll('.js-plotly-plot .main-svg').length")
            browser.save_screenshot(str(IMAGES / "report.png"))
            _graph(browser)
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/api/meta", timeout=5)
                    break
                except OSError:
                    time.sleep(0.1)
            browser.get(f"http://127.0.0.1:{port}/dashboard/studies/0")
            _wait(browser, "return document.body.innerText.includes('latency_us')")
            browser.save_screenshot(str(IMAGES / "dashboard.png"))
        finally:
            browser.quit()
            server.terminate()
            server.wait(30)
    for name in ("report.png", "graph.png", "dashboard.png"):
        print(f"wrote {IMAGES / name} ({(IMAGES / name).stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
