"""autotune: search-based operator fusion and tiling for Ascend NPUs.

The public Python surface; the CLI (``autotune ...``) is :mod:`autotune.cli`. Every error the
tool raises on purpose (bad input, a plan for another model, an infeasible config, a failed
simulation) derives from :class:`AutofusionError`; :class:`PlanError` is a plan file's.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from autotune.api import Plan, load_plan, tune
from autotune.exceptions import AutotuneError
from autotune.zoo import ZooOptions, load_model_spec
from search_space import AutofusionError, Graph, load_graph
from search_space.space import PlanError

__all__ = [
    "AutofusionError",
    "AutotuneError",
    "Graph",
    "Plan",
    "PlanError",
    "ZooOptions",
    "load_graph",
    "load_model_spec",
    "load_plan",
    "tune",
]
try:
    __version__ = version("ascend-autofusion")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
