"""Errors of the autotune package (all derive from the tool-wide base)."""

from __future__ import annotations

from search_space.atomic import OutputError
from search_space.exceptions import AutofusionError

__all__ = ["AutotuneError", "OutputError"]


class AutotuneError(AutofusionError):
    """A user-facing problem in a tuner, zoo or CLI request."""
