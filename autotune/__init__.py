"""autotune: search-based operator fusion and tiling for Ascend NPUs.

The public Python surface; the CLI (``autotune ...``) is :mod:`autotune.cli`. Every error the
tool raises on purpose (bad input, a plan for another model, an infeasible config, a failed
simulation) derives from :class:`AutofusionError`; :class:`PlanError` is a plan file's.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ imports on first use, named for type checkers
    from autotune.api import Plan, load_plan, tune
    from autotune.exceptions import AutotuneError
    from autotune.frontend import OptimizedModule, optimize
    from search_space import AutofusionError, Graph, load_graph
    from search_space.space import PlanError
    from search_space.zoo import ZooOptions, load_model_spec

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

# each public name and the module it comes from: imported on first use, so that the command
# line's --version, --help and completion do not import onnx, scikit-learn and the tuner
_HOMES = {
    "Plan": "autotune.api",
    "load_plan": "autotune.api",
    "tune": "autotune.api",
    "AutotuneError": "autotune.exceptions",
    "optimize": "autotune.frontend",  # the PyTorch front end: needs the [torch] extra
    "OptimizedModule": "autotune.frontend",
    "ZooOptions": "search_space.zoo",
    "load_model_spec": "search_space.zoo",
    "AutofusionError": "search_space",
    "Graph": "search_space",
    "load_graph": "search_space",
    "PlanError": "search_space.space",
}


def __getattr__(name: str) -> object:
    """A public name, imported from its home module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'autotune' has no attribute '{name}'")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


try:
    __version__ = version("ascend-autofusion")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
