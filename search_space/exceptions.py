"""Exceptions shared by every package of the tool.

Every error the tool raises on purpose derives from :class:`AutofusionError`; the CLI turns it
into one line on stderr and exit status 1. Messages state the rule and the value received, and
the fix when there is one.
"""

from __future__ import annotations

__all__ = [
    "AutofusionError",
    "DynamicShapeError",
    "GraphError",
    "ModelLoadError",
    "check",
]


class AutofusionError(Exception):
    """Base of every deliberate error of the tool (search_space, costmodel, autotune)."""


class ModelLoadError(AutofusionError):
    """The model file or proto cannot be read as an ONNX model we support."""


class DynamicShapeError(ModelLoadError):
    """A graph input has a dimension that is not static and no shape was given for it."""


class GraphError(AutofusionError):
    """The graph breaks a structural rule (cycle, duplicate tensor, bad reference)."""


def check(cond: object, msg: str, exc: type[AutofusionError] = GraphError) -> None:
    """Raise ``exc(msg)`` unless ``cond`` is truthy.

    Raises:
        AutofusionError: the given subclass, when ``cond`` is falsy.
    """
    if not cond:
        raise exc(msg)
