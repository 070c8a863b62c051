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
    "OptimizedModule",
    "Plan",
    "PlanError",
    "ZooOptions",
    "load_graph",
    "load_model_spec",
    "load_plan",
    "optimize",
    "tune",
]


def __getattr__(name: str) -> object:
    """``autotune.optimize`` (and ``OptimizedModule``): the PyTorch front end, imported on
    first use (it needs the ``[torch]`` extra)."""
    if name in ("optimize", "OptimizedModule"):
        from autotune import frontend

        return getattr(frontend, name)
    raise AttributeError(f"module 'autotune' has no attribute '{name}'")


try:
    __version__ = version("ascend-autofusion")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
