"""Where a page gets plotly.js (``--plotly inline|cdn|directory``, issue 46 item 7): inline by
default, a CDN script tag, or one ``plotly.min.js`` beside the pages of a folder. (The
candidates page draws its graph with Graphviz and carries no plotly at all.)"""

from __future__ import annotations

from pathlib import Path

import plotly
import pytest
from plotly.offline import get_plotlyjs
from quick_study import run, tune_args

LIBRARY = get_plotlyjs()[-4000:]  # a stretch of the library itself


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("plotly")
    res = run(*tune_args(folder))
    assert res.exit_code == 0, res.stderr
    return folder / "plan.json"


def _pages(folder: Path, plan: Path, mode: str) -> list[Path]:
    folder.mkdir()
    pages = [folder / "report.html", folder / "again.html"]  # two pages of one folder
    for page in pages:
        res = run("report", str(plan), "--html", str(page), "--plotly", mode)
        assert res.exit_code == 0, res.stderr
    return pages


def test_inline_pages_carry_the_library(plan: Path, tmp_path: Path) -> None:
    for page in _pages(tmp_path / "inline", plan, "inline"):
        assert LIBRARY in page.read_text()
    assert not (tmp_path / "inline" / "plotly.min.js").exists()


def test_cdn_pages_name_the_installed_version(plan: Path, tmp_path: Path) -> None:
    for page in _pages(tmp_path / "cdn", plan, "cdn"):
        text = page.read_text()
        assert LIBRARY not in text and page.stat().st_size < 500_000
        assert f"https://cdn.plot.ly/plotly-{plotly.offline.get_plotlyjs_version()}" in text


def test_directory_pages_share_one_library_beside_them(plan: Path, tmp_path: Path) -> None:
    pages = _pages(tmp_path / "dir", plan, "directory")
    bundle = tmp_path / "dir" / "plotly.min.js"
    assert bundle.read_text() == get_plotlyjs()
    for page in pages:
        text = page.read_text()
        assert LIBRARY not in text and 'src="plotly.min.js"' in text


def test_an_unknown_mode_is_one_line_and_writes_nothing(plan: Path, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    res = run("report", str(plan), "--html", str(page), "--plotly", "web")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 1 and len(lines) == 1 and "inline, cdn, directory" in lines[0]
    assert not page.exists() and not (tmp_path / "plotly.min.js").exists()
