"""The ``autotune`` backend of ``torch.compile``:
``torch.compile(module, backend="autotune", options={"trials": 40, ...})``.

Dynamo hands the backend each FX graph it captured (a graph break splits the model into
several, and runs what lies between them eagerly). The backend specialises every graph on the
shapes it is called with: the first call at new shapes exports the graph at those shapes and
``optimize``s it (the plan cache answers for shapes tuned before, in this process or an
earlier one); later calls at those shapes run its kernels. So a recompilation for new shapes,
or dynamo making a dimension dynamic, tunes (or hits the cache) for the shapes that occur.
``options`` are ``optimize``'s keyword arguments. A graph that does not export or tune runs
eagerly, with a warning naming why.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch

from autotune.exceptions import AutotuneError
from autotune.frontend.optimize import kernel_device, optimize, policy_of
from autotune.tuner import TuneConfig
from search_space import AutofusionError

__all__ = ["autotune_backend"]

log = logging.getLogger(__name__)


def autotune_backend(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    options: Mapping[str, Any] | None = None,
    mode: str | None = None,
) -> Callable[..., Any]:
    """A compiled callable for ``gm`` (what dynamo asks of a backend).

    Raises:
        AutofusionError: options ``optimize`` does not take, or a policy that does not load.
    """
    opts = dict(options or {})
    unknown = sorted(set(opts) - _OPTIONS)
    if unknown:
        takes = ", ".join(sorted(_OPTIONS))
        raise AutotuneError(f"unknown autotune backend option '{unknown[0]}'; it takes {takes}")
    policy_of(opts.get("config"), opts.get("optimization_level"))  # a bad policy fails here
    kernel_device()
    del example_inputs, mode  # the shapes are read on each call
    return _Specialised(gm, opts)


# optimize()'s keyword arguments and the tune options it passes on (TuneConfig's fields but
# those optimize sets itself)
_OPTIONS = frozenset(
    {n for n, p in inspect.signature(optimize).parameters.items() if p.kind is p.KEYWORD_ONLY}
    | {f.name for f in dataclasses.fields(TuneConfig)} - {"storage", "policy", "sets"}
)


class _Bound(torch.nn.Module):
    """``gm`` with its non-tensor arguments (dynamic sizes) fixed: a module of tensors."""

    def __init__(self, gm: torch.fx.GraphModule, args: tuple[Any, ...]) -> None:
        super().__init__()
        self.gm = gm
        self.fixed = {i: a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
        self.count = len(args)

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        args = [self.fixed[i] if i in self.fixed else next(it) for i in range(self.count)]
        return tuple(self.gm(*args))


class _Specialised:
    """``gm`` optimised once per signature of the arguments it is called with."""

    def __init__(self, gm: torch.fx.GraphModule, options: Mapping[str, Any]) -> None:
        self.gm, self.options = gm, dict(options)
        self.compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, *args: Any) -> Any:
        key = tuple(
            (tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor) else a
            for a in args
        )
        fn = self.compiled.get(key)
        if fn is None:
            fn = self.compiled[key] = self._compile(args)
        return fn(*args)

    def _compile(self, args: tuple[Any, ...]) -> Callable[..., Any]:
        bound = _Bound(self.gm, args)
        tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
        try:
            module = optimize(bound, tensors, **self.options)
        except AutofusionError as err:  # this graph runs eagerly; the rest keeps its kernels
            log.warning("autotune: a graph runs eagerly: %s", err)
            return self.gm.forward

        def run(*call: Any) -> Any:
            return module(*(a for a in call if isinstance(a, torch.Tensor)))

        return run
