"""The two ways code generation says no: a group no template expresses, and a bad request."""

from __future__ import annotations

from search_space.exceptions import AutofusionError

__all__ = ["CodegenError", "Unsupported"]


class CodegenError(AutofusionError):
    """A plan or request code generation refuses: a config no template can run (a tile over
    the unified buffer, more programs than cores), or inputs of the wrong shape or dtype."""


class Unsupported(AutofusionError):
    """A group (or op) that no template expresses; the message is the reason, and the group
    runs as its ops instead. Internal: it never reaches a user as an error."""
