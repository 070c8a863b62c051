"""The README's two pictures: the report page and the dashboard of a fresh bert-base study,
taken in headless Chromium (Debian's, `make browser`).

    cd experiments && ../.venv/bin/python screenshots.py  # -> docs/images/{report,dashboard}.png

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
    for name in ("report.png", "dashboard.png"):
        print(f"wrote {IMAGES / name} ({(IMAGES / name).stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
