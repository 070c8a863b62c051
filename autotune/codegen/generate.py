"""From a model and a plan to generated kernels: the one entry point the CLI, the Python
API and the checks share."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from autotune.codegen.errors import CodegenError
from autotune.codegen.package import write_package
from autotune.codegen.program import Program, build_program
from autotune.estimate import plan_kernels
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.registry import make_cost_model
from costmodel.spec import HardwareSpec, Target
from search_space.ir import Graph, KernelConfig
from search_space.rules import Policy
from search_space.space import FusionPlan

__all__ = ["Generated", "check_cores", "generate"]


@dataclass(frozen=True)
class Generated:
    """A plan's program with what the package records about it."""

    program: Program
    model: onnx.ModelProto
    meta: Mapping[str, Any]
    predicted: Mapping[int, float] = field(default_factory=dict)
    given: frozenset[str] = frozenset()  # compile-time tensors the caller supplies

    def write(self, out: str | Path, *, force: bool = False, force_hint: bool = True) -> Path:
        """The package in ``out`` (``package.write_package``; ``given`` not stored)."""
        return write_package(
            out,
            self.model,
            self.program,
            self.meta,
            self.predicted,
            force=force,
            force_hint=force_hint,
            given=self.given,
        )


def check_cores(kernels: list[Kernel], spec: HardwareSpec) -> None:
    """A kernel may not ask for more programs than the cores it runs on.

    Raises:
        CodegenError: naming the first group that does.
    """
    for i, k in enumerate(kernels):
        cores = spec.cube_cores if k.unit in ("cube", "mixed") else spec.vector_cores
        if k.config.block_dim > cores:
            raise CodegenError(
                f"group {i} (starting at '{k.ops[0]}') asks for {k.config.block_dim} programs "
                f"but {spec.name} has {cores} {k.unit} cores; re-tune the plan for this target"
            )


def generate(
    model: onnx.ModelProto,
    graph: Graph,
    plan: str | FusionPlan,
    target: Target,
    *,
    policy: Policy | None = None,
    model_name: str = "",
    given: Collection[str] = (),
) -> Generated:
    """Kernels for a plan (a baseline name: none, greedy, max, optimal; or a plan record);
    ``given`` compile-time tensors (a PyTorch module's weights) are read in place from what
    the caller passes the runner, never stored in the package.

    Raises:
        PlanError: a plan for another model or target; InfeasibleConfig: a config that
            overflows a buffer; CodegenError: more programs than cores.
    """
    groups, kernels = plan_kernels(graph, plan, target, policy)
    check_cores(kernels, target.spec)
    # a model with an empty tensor has no kernels: its ops run in the framework
    configs = [k.config for k in kernels] or [KernelConfig(block_dim=1)] * len(groups)
    default = Lowering(graph, target).default if kernels else None
    program = build_program(graph, groups, configs, default, target.precision, given)
    costs = make_cost_model("analytic", target).evaluate(kernels) if kernels else []
    predicted = {i: c.device_us for i, c in enumerate(costs)}
    meta = {
        "model": model_name or graph.name,
        "plan": plan if isinstance(plan, str) else "plan file",
        "target": target.spec.name,
        "precision": target.precision,
        "fingerprint": graph.fingerprint(),
        "n_kernels": len(program.kernels),
        "unfused_groups": len(program.unfused),
        "framework_ops": len(program.externs),
    }
    return Generated(program, model, meta, predicted, frozenset(given))
