"""autotune: search-based operator fusion and tiling for Ascend NPUs.

The public Python surface; the CLI (``autotune ...``) is :mod:`autotune.cli`.
"""

from __future__ import annotations

from autotune.api import Plan, load_plan, tune
from autotune.exceptions import AutotuneError
from autotune.zoo import ZooOptions, load_model_spec
from search_space import Graph, load_graph

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
