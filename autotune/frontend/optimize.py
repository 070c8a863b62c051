"""``optimize(module, example_inputs)``: a PyTorch module in, a faster PyTorch module out.

The module is exported to ONNX at the example inputs' shapes (``frontend.export``), tuned
(or its plan read from the cache, ``frontend.cache``), and its plan's kernels generated
(``autotune.codegen``); the module returned runs them (on npu, cuda, or Triton's CPU
interpreter, whichever is present first) and reads the original module's parameters and
buffers, not copies. The policy is the CLI config's (``docs/fusion.md``);
``optimization_level`` 0-3 is its ``fusion_level``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from autotune.exceptions import AutotuneError
from autotune.frontend.cache import PlanCache, cache_root
from autotune.frontend.export import Exported, as_inputs, export_module, tensors_of
from costmodel.spec import load_target
from search_space import load_graph
from search_space.rules import Policy, load_policy
from search_space.space import FusionPlan

__all__ = ["OptimizedModule", "optimize", "policy_of"]

log = logging.getLogger(__name__)
PolicyLike = Policy | Mapping[str, Any] | str | os.PathLike[str] | None


def policy_of(config: PolicyLike = None, optimization_level: int | None = None) -> Policy:
    """The fusion policy from a config: a Policy, a mapping of its fields (as under
    ``[policy]`` in the CLI's TOML), or a TOML file; ``optimization_level`` (0-3) sets its
    ``fusion_level``.

    Raises:
        AutofusionError: a bad field, file or level, in one line.
    """
    if optimization_level is not None and optimization_level not in (0, 1, 2, 3):
        raise AutotuneError(f"optimization_level {optimization_level!r} is not one of 0, 1, 2, 3")
    level = {"fusion_level": optimization_level} if optimization_level is not None else {}
    if isinstance(config, Policy):
        return config.replace(**level) if level else config
    if isinstance(config, Mapping):
        return load_policy(None, {**dict(config), **level})
    return load_policy(Path(config) if config is not None else None, level)


def optimize(
    module: torch.nn.Module,
    example_inputs: Any,
    *,
    trials: int = 60,
    target: str = "ascend910b",
    config: PolicyLike = None,
    optimization_level: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    precision: str = "auto",
    **tune_options: Any,
) -> OptimizedModule:
    """``module`` tuned for ``target`` at the shapes of ``example_inputs``, as a module that
    runs the generated kernels; ``tune_options`` are ``autotune.tune``'s (``cost``,
    ``sampler``, ``seed``...). A second call for the same graph, target and policy reads the
    plan from the cache and tunes nothing.

    Raises:
        AutofusionError: bad example inputs, a module that does not export, a target or
            config that does not load (one line each; nothing is cached).
    """
    kernel_device()  # before the exporter imports triton
    inputs = as_inputs(example_inputs)
    policy = policy_of(config, optimization_level)
    tgt = load_target(target, (), precision)
    exported = export_module(module, inputs)
    graph = load_graph(exported.model)
    cache = PlanCache(cache_root(cache_dir))
    key = cache.key(graph, tgt, policy)
    plan = cache.load(key, graph)
    if plan is None:
        plan = _tune(exported, trials, target, precision, policy, tune_options)
        cache.store(key, plan)
        log.info("tuned %s and cached its plan as %s", type(module).__name__, key)
    else:
        log.info("plan cache hit %s: nothing to tune", key)
    return OptimizedModule(module, exported, _kernels(exported, graph, plan, tgt, cache, key))


def kernel_device() -> str:
    """Where generated kernels run (``runtime.pick_device``): npu, cuda, or Triton's CPU
    interpreter."""
    from autotune.codegen.runtime import pick_device

    return pick_device()


def _tune(
    exported: Exported,
    trials: int,
    target: str,
    precision: str,
    policy: Policy,
    options: Mapping[str, Any],
) -> FusionPlan:
    from autotune.api import tune

    with tempfile.TemporaryDirectory(prefix="autotune-study-") as tmp:
        plan = tune(
            exported.model,
            trials=trials,
            target=target,
            precision=precision,
            policy=policy,
            storage=str(Path(tmp) / "study.journal"),
            **options,
        )
    return plan.record


def _kernels(
    exported: Exported, graph: Any, plan: FusionPlan, target: Any, cache: PlanCache, key: str
) -> Path:
    """The plan's package, generated into the cache (the module's own weights not stored)."""
    from autotune.codegen.generate import generate

    gen = generate(
        exported.model, graph, plan, target, model_name=graph.name, given=exported.weights
    )
    folder = cache.kernels_path(key)
    folder.parent.mkdir(parents=True, exist_ok=True)
    return gen.write(folder, force=True, force_hint=False)


class OptimizedModule(torch.nn.Module):
    """A module's forward as the generated kernels of its tuned plan. Its inputs are the
    module's forward's tensors, its outputs what the module returns (a tensor, or a tuple or
    list of them); the module's parameters and buffers are read in place."""

    def __init__(self, module: torch.nn.Module, exported: Exported, folder: Path) -> None:
        super().__init__()
        from autotune.codegen.execute import load_package

        self.package = load_package(folder)
        self.folder = folder
        self.exporter = exported.exporter
        self._structure = exported.structure
        own = {**dict(module.named_parameters()), **dict(module.named_buffers())}
        given = {name: own[name].detach() for name in exported.weights}
        self.kernels = self.package.runner.Model(params=given)
        self._feed = [exported.inputs.index(t) for t in self.package.INPUTS]

    @property
    def device(self) -> str:
        """Where the kernels run: npu, cuda, or cpu (Triton's interpreter)."""
        return str(self.package.runner.DEVICE)

    def forward(self, *args: torch.Tensor) -> Any:
        dev = self.kernels.device
        feeds = [args[i].to(dev) for i in self._feed]
        with torch.no_grad():
            outs = self.kernels(*feeds)
        return tensors_of(self._structure, list(outs))
