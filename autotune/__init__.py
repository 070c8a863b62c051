"""autotune: search-based operator fusion and tiling for Ascend NPUs.

The public Python surface; the CLI (``autotune ...``) is :mod:`autotune.cli`.
"""

from __future__ import annotations

from search_space import Graph, load_graph

from .api import Plan, load_plan, tune
from .exceptions import AutotuneError
from .models import ZooOptions, load_model_spec

__all__ = [
    "AutotuneError",
    "Graph",
    "Plan",
    "ZooOptions",
    "load_graph",
    "load_model_spec",
    "load_plan",
    "tune",
]
__version__ = "0.1.0"
