"""Safe mode: verify a plan's fused kernels numerically and unfuse the failures.

The study runs every plan it measures through this check (:meth:`Session.measure`), and the
signatures that fail become constraints of its space (:meth:`SearchSpace.forbid`). The plan it
outputs also has its generated code checked (:mod:`autotune.tuner.safety_codegen`), on the
same model values (:attr:`Safety.model`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from autotune.verify import KernelVerdict, safe_groups, verify_kernels
from costmodel.lower import Lowering
from costmodel.spec import Target
from search_space.ir import Graph, make_group
from search_space.onnx import read_model
from search_space.rules import Policy
from search_space.space import PlanGroup, SpacePlan
from search_space.zoo import ZooError, ZooOptions, resolve_model

__all__ = ["Checked", "Safety", "make_safety", "replanned"]


@dataclass(frozen=True)
class Checked:
    """One plan through safe mode.

    Attributes:
        plan: the plan with its failing kernels unfused (the plan itself when none failed).
        counts: the report counts (:func:`~autotune.verify.safe_groups`).
        verdicts: the verdict of every fused group kept, by its ops.
        failed: signature -> the verdict of every kernel signature that was unfused.
    """

    plan: SpacePlan
    counts: dict[str, int]
    verdicts: dict[tuple[str, ...], str]
    failed: dict[str, KernelVerdict] = field(default_factory=dict)


@dataclass(frozen=True)
class Safety:
    """Safe mode's checks of one model (:func:`make_safety`). Called on a plan, it verifies
    the plan's fused kernels numerically and unfuses the failures (:class:`Checked`).

    Attributes:
        check: that verification (the call).
        model: the model with the values every check runs on (read once, on first use).
        known: the verdicts reached so far, by (signature, numerics key): the checks add to
            it, and a study may fill it from earlier studies
            (:mod:`autotune.tuner.verdict_store`).
        scope: the digest of what those verdicts depend on besides the kernel (reads the
            model).
    """

    check: Callable[[SpacePlan], Checked]
    model: Callable[[], onnx.ModelProto]
    known: MutableMapping[tuple[str, Any], KernelVerdict] = field(default_factory=dict)
    scope: Callable[[], str] = lambda: ""

    def __call__(self, plan: SpacePlan) -> Checked:
        return self.check(plan)


def replanned(
    graph: Graph, target: Target, plan: SpacePlan, groups: Sequence[PlanGroup]
) -> SpacePlan:
    """``plan`` regrouped as ``groups`` (some of its groups unfused into single ops): a kept
    group keeps its config, a new one gets its default config."""
    new_groups = tuple(make_group(graph, g.ops, g.kind) for g in groups)
    configs_by_ops = {g.ops: c for g, c in zip(plan.groups, plan.configs, strict=True)}
    low = Lowering(graph, target)
    return SpacePlan(
        new_groups, tuple(configs_by_ops.get(g.ops) or low.default(g) for g in new_groups)
    )


def make_safety(
    graph: Graph,
    model: str | onnx.ModelProto,
    zoo: ZooOptions | None,
    policy: Policy,
    target: Target,
) -> Safety:
    """Safe mode's checks for :func:`autotune.tuner.tune_graph` (:class:`Safety`).

    Zoo models are rebuilt with random weights (verification needs values; a model too large
    for that keeps its weights as inputs, and each check draws the ones it reads); files are
    read as given. The model is read once and every kernel checked once per signature and the part
    of its config its arithmetic depends on (:func:`~autotune.verify.numerics.numerics_key`):
    a study checks many plans that share kernels. The same model feeds the code-generation
    check of the study's output plan (:mod:`autotune.tuner.safety_codegen`).
    """
    known: dict[tuple[str, Any], KernelVerdict] = {}  # kept across studies by the loop

    @functools.cache
    def proto() -> onnx.ModelProto:
        if isinstance(model, onnx.ModelProto):
            return model
        opts = dataclasses.replace(zoo or ZooOptions(), weights="random")
        try:
            source = resolve_model(model, opts)
        except ZooError:  # too large for one protobuf: each check draws the weights it reads
            source = resolve_model(model, dataclasses.replace(opts, weights="inputs"))
        return source if isinstance(source, onnx.ModelProto) else read_model(source)[0]

    def check(plan: SpacePlan) -> Checked:
        groups = [
            PlanGroup(g.ops, g.kind, c) for g, c in zip(plan.groups, plan.configs, strict=True)
        ]
        verdicts = verify_kernels(proto(), graph, groups, target, policy, known=known)
        kept, counts = safe_groups(groups, verdicts, strict=policy.strict_safety)
        by_ops = {g.ops: g.verdict for g in kept if g.verdict}
        failed = {v.signature: v for v in verdicts if not v.kept(policy.strict_safety)}
        if len(kept) == len(groups):
            return Checked(plan, counts, by_ops, failed)
        return Checked(replanned(graph, target, plan, kept), counts, by_ops, failed)

    def scope() -> str:
        from autotune.tuner.verdict_store import scope as digest

        return digest(proto(), graph, target, policy)

    return Safety(check, proto, known, scope)
