"""The ``autotune`` command line; ``main`` is the console script."""

from __future__ import annotations

from autotune.cli.app import app, main

__all__ = ["app", "main"]
