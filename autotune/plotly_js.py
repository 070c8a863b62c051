"""Where an HTML page gets plotly.js from (``report --html``, ``candidates --html``).

* ``inline`` (the default): inside the page, which then opens anywhere, offline (~4.8 MB
  each);
* ``cdn``: a ``<script>`` from plotly's CDN at the version installed here (a few KB; the
  browser needs the network to draw it);
* ``directory``: ``plotly.min.js`` beside the page, written once and shared by every page of
  the folder (a few KB each, offline; move the folder, not the page alone).
"""

from __future__ import annotations

from pathlib import Path

from autotune.exceptions import AutotuneError

__all__ = ["BUNDLE", "PLOTLY_MODES", "check_mode", "include", "write_bundle"]

PLOTLY_MODES = ("inline", "cdn", "directory")
BUNDLE = "plotly.min.js"  # the file plotly's "directory" mode points a page at


def check_mode(mode: str) -> str:
    """``mode`` itself.

    Raises:
        AutotuneError: not one of :data:`PLOTLY_MODES`.
    """
    if mode not in PLOTLY_MODES:
        raise AutotuneError(f"--plotly '{mode}' is not one of {', '.join(PLOTLY_MODES)}")
    return mode


def include(mode: str, first: bool) -> bool | str:
    """``include_plotlyjs`` for a figure of a page: the library with the page's first figure
    (inline) or its script tag (cdn, directory); nothing with the others."""
    if not first:
        return False
    return True if mode == "inline" else mode


def write_bundle(mode: str, page: Path) -> Path | None:
    """In ``directory`` mode, ``plotly.min.js`` beside ``page`` (written where it is not
    there already, atomically); its path, or None in the other modes."""
    if mode != "directory":
        return None
    from plotly.offline import get_plotlyjs

    from search_space.atomic import atomic_write_text

    bundle = page.parent / BUNDLE
    if not bundle.is_file():
        atomic_write_text(bundle, get_plotlyjs())
    return bundle
