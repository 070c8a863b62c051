"""Safe mode's code-generation check: the plan a study outputs, generated as Triton kernels
(:func:`autotune.codegen.generate.generate`), each kernel run alone on onnxruntime's values of
its inputs (:func:`autotune.codegen.check.check_package`). A fused group whose kernel
disagrees with the unfused graph is unfused into single ops, as safe mode unfuses a kernel
whose numerics fail, with the reason as its verdict.

It runs once per study, on the output plan only: without an npu or cuda device Triton's CPU
interpreter runs the kernels, seconds for one small layer and minutes for a full-size model,
too slow for every plan the study measures. ``codegen_check`` in the policy says when:
``auto`` (default) when the ``[codegen]`` extra (triton, torch) is installed and either a
device is present or the graph's work is within :data:`CODEGEN_CHECK_FLOPS` and
:data:`CODEGEN_CHECK_OPS`; ``on`` always (an error at the start of the study without the
extra); ``off`` never.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from autotune.exceptions import AutotuneError
from autotune.tuner.records import Candidate
from autotune.tuner.safety import Safety, replanned
from autotune.tuner.session import Session
from costmodel.spec import Target
from search_space.ir import Graph
from search_space.rules import Policy
from search_space.space import FusionPlan, PlanGroup, SpacePlan

if TYPE_CHECKING:  # annotations only: the check imports the code generator when it runs
    from autotune.codegen.check import CodegenCheck, KernelCheck

__all__ = [
    "CODEGEN_CHECK_FLOPS",
    "CODEGEN_CHECK_OPS",
    "EXTRA",
    "CodegenChecked",
    "check_generated",
    "codegen_safe",
    "device",
    "has_codegen_extra",
    "require_codegen_extra",
    "skip_reason",
    "unfuse_failing",
]

log = logging.getLogger(__name__)

# The work `auto` checks in Triton's CPU interpreter (no device): FLOPs, and ops that do work
# (a kernel costs 0.5-1.3 s there however small: a 12-layer bert-base at scale 0.1 is 0.09
# GFLOPs and took 76 s). Within both, the zoo models measured took 9-24 s, mobilenetv3 up to
# 45 s (experiments/bench_codegen_check.py, docs/verification.md).
CODEGEN_CHECK_FLOPS = 1.5e8
CODEGEN_CHECK_OPS = 100
EXTRA = "pip install 'ascend-autofusion[codegen]'"
INTERPRETER = "cpu"  # what the generated runner calls Triton's CPU interpreter


@dataclass(frozen=True)
class CodegenChecked:
    """The output plan through the code-generation check.

    Attributes:
        plan: the plan with every fused group whose generated kernel disagreed unfused (the
            plan itself when none did, or when the check did not run).
        verdicts: the verdict of each single-op group it unfused, by its ops.
        summary: what the plan's ``meta.codegen_check`` records: ``ran``, and either why it was
            skipped (``skipped``) or the device, the groups and kernels it checked, the groups
            it unfused and each failing kernel with its largest relative error.
    """

    plan: SpacePlan
    verdicts: dict[tuple[str, ...], str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def unfused(self) -> int:
        return int(self.summary.get("unfused", 0))


def has_codegen_extra() -> bool:
    """Are triton and torch (the ``[codegen]`` extra) importable?"""
    return all(importlib.util.find_spec(m) is not None for m in ("triton", "torch"))


def require_codegen_extra(policy: Policy) -> None:
    """``codegen_check = on`` in safe mode needs the extra: fail before the study, not after.

    Raises:
        AutotuneError: naming the extra and how to install it.
    """
    if policy.safe_mode and policy.codegen_check == "on" and not has_codegen_extra():
        raise AutotuneError(f"`codegen_check = on` needs the [codegen] extra: {EXTRA}")


@contextmanager
def _environment_kept() -> Iterator[None]:
    """The generated runner sets ``TRITON_INTERPRET=1`` where no device is present; the check
    leaves the process's environment as it found it."""
    saved = os.environ.get("TRITON_INTERPRET")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved


def device() -> str:
    """Where generated kernels would run: npu, cuda, or ``cpu`` (Triton's interpreter), as
    the generated runner picks it (``AUTOTUNE_DEVICE`` chooses)."""
    from autotune.codegen.runtime import pick_device

    with _environment_kept():
        return pick_device()


def skip_reason(graph: Graph, policy: Policy) -> str | None:
    """Why the policy skips the check on ``graph`` (None: it runs); the device is asked only
    when the answer depends on it (asking imports torch)."""
    if not policy.safe_mode:
        return "safe mode is off"
    if policy.codegen_check == "off":
        return "codegen_check = off"
    if policy.codegen_check == "on":
        return None
    if not has_codegen_extra():
        return f"the [codegen] extra (triton, torch) is not installed: {EXTRA}"
    ops = sum(1 for op in graph.ops if not op.is_view and not op.constant)
    if (
        graph.flops <= CODEGEN_CHECK_FLOPS and ops <= CODEGEN_CHECK_OPS
    ) or device() != INTERPRETER:
        return None
    return (
        f"no npu or cuda device, and the graph ({graph.flops / 1e9:.3g} GFLOPs, {ops} ops) is "
        f"over what Triton's CPU interpreter checks under codegen_check = auto "
        f"({CODEGEN_CHECK_FLOPS / 1e9:g} GFLOPs, {CODEGEN_CHECK_OPS} ops; "
        "codegen_check = on runs it anyway)"
    )


def _worst(k: KernelCheck) -> tuple[str, float]:
    bad = [t for t in k.outputs if not t.ok] or list(k.outputs)
    t = max(bad, key=lambda t: t.max_rel_err)
    return t.name, t.max_rel_err


def _verdict(k: KernelCheck) -> str:
    tensor, rel = _worst(k)
    return (
        f"unfused: codegen check: generated kernel {k.kernel} disagrees with onnxruntime "
        f"(max rel err {rel:.3g} on '{tensor}')"
    )


def unfuse_failing(
    graph: Graph,
    target: Target,
    plan: SpacePlan,
    result: CodegenCheck,
    as_ops: Collection[int] = (),
) -> tuple[SpacePlan, dict[tuple[str, ...], str], list[dict[str, Any]]]:
    """``plan`` with every fused group among ``result``'s failing groups split into its ops
    that do work (views and constant-only ops are no kernels alone), each with the verdict.

    Returns:
        The plan, the new groups' verdicts by ops, and a row per failing group (its ops, the
        kernel and its error; ``unfused`` false for a single op, which has nothing to unfuse;
        ``ran_as_ops`` for a group no template expressed whole, ``as_ops``, whose failing
        kernel is one of its ops').
    """
    worst: dict[int, KernelCheck] = {}
    for check in result.kernels:
        seen = worst.get(check.group)
        if not check.ok and (seen is None or _worst(check)[1] > _worst(seen)[1]):
            worst[check.group] = check
    groups: list[PlanGroup] = []
    verdicts: dict[tuple[str, ...], str] = {}
    rows: list[dict[str, Any]] = []
    for i, (g, c) in enumerate(zip(plan.groups, plan.configs, strict=True)):
        work = [o for o in g.ops if not graph.op(o).is_view and not graph.op(o).constant]
        k = worst.get(i)
        if k is not None:
            tensor, rel = _worst(k)
            rows.append(
                {
                    "ops": list(g.ops),
                    "kernel": k.kernel,
                    "tensor": tensor,
                    "max_rel_err": rel,
                    "unfused": len(work) > 1,
                    "ran_as_ops": i in as_ops,
                }
            )
        if k is None or len(work) < 2:
            groups.append(PlanGroup(g.ops, g.kind, c))
            continue
        log.warning("group %d (%s...): %s", i, g.ops[0], _verdict(k))
        for op in work:
            groups.append(PlanGroup((op,), "single", None, _verdict(k)))
            verdicts[(op,)] = _verdict(k)
    if not verdicts:
        return plan, verdicts, rows
    return replanned(graph, target, plan, groups), verdicts, rows


def check_generated(
    model: onnx.ModelProto, graph: Graph, plan: SpacePlan, target: Target, policy: Policy
) -> CodegenChecked:
    """Generate ``plan``'s package in a temporary folder, run every kernel alone against
    onnxruntime, and unfuse the fused groups whose kernel disagrees (:func:`unfuse_failing`).
    Failures are data: a plan the generator or the check cannot run is kept, with the error
    in the summary."""
    from autotune.codegen.check import check_package
    from autotune.codegen.generate import generate

    record = FusionPlan(
        fingerprint=graph.fingerprint(),
        target=target.spec.name,
        groups=tuple(
            PlanGroup(g.ops, g.kind, c) for g, c in zip(plan.groups, plan.configs, strict=True)
        ),
        precision=target.precision,
    )
    start = time.perf_counter()
    try:
        where = device()
        with _environment_kept(), tempfile.TemporaryDirectory(prefix="autotune-check-") as tmp:
            gen = generate(model, graph, record, target, policy=policy)
            result = check_package(gen.write(Path(tmp) / "package"), model, gen.program)
    except Exception as err:  # the plan stays as it is; the study's answer is not lost
        log.warning("codegen check could not run: %s: %s", type(err).__name__, err)
        return CodegenChecked(
            plan, summary={"ran": False, "error": f"{type(err).__name__}: {err}"}
        )
    as_ops = {i for i, _ in gen.program.unfused}
    safe, verdicts, rows = unfuse_failing(graph, target, plan, result, as_ops)
    if not rows and not all(t.ok for t in result.outputs):
        log.warning("codegen check: the package's outputs disagree, though no kernel alone does")
    checked = {k.group for k in result.kernels}
    summary = {
        "ran": True,
        "device": where,
        "groups": len(checked),
        "fused_groups": sum(1 for i in checked if len(plan.groups[i].ops) > 1),
        "kernels": len(result.kernels),
        "groups_run_as_ops": len(as_ops),
        "unfused": sum(1 for r in rows if r["unfused"]),
        "failing": rows,
        "outputs_ok": all(t.ok for t in result.outputs),
        "seconds": round(time.perf_counter() - start, 1),
    }
    return CodegenChecked(safe, verdicts, summary)


def codegen_safe(
    s: Session,
    winner: Candidate,
    safety: Safety | None,
    report: Mapping[str, int],
    verdicts: Mapping[tuple[str, ...], str],
) -> tuple[Candidate, dict[str, int], dict[tuple[str, ...], str], dict[str, Any]]:
    """The loop's step after safe mode: the output plan's generated code checked (when the
    policy says so), its disagreeing fused groups unfused and the result measured.

    Returns:
        The winner, the report counts and verdicts (with ``codegen_checked`` and
        ``skipped_codegen`` when the check ran), and the summary for ``meta.codegen_check``
        (also the study's user attribute ``codegen_check``, without the failing rows).

    Raises:
        AutotuneError: the plan with its failing groups unfused could not be simulated.
    """
    policy = s.config.policy
    if s.interrupted:  # Ctrl-C wants out now
        why: str | None = "interrupted"
    elif safety is None:  # tune_graph without safe mode's checks
        why = "safe mode is off"
    else:
        why = skip_reason(s.graph, policy)
    if why is not None or safety is None:
        summary: dict[str, Any] = {"ran": False, "skipped": why}
        s.study.set_user_attr("codegen_check", summary)
        log.info("codegen check skipped: %s", why)
        return winner, dict(report), dict(verdicts), summary
    checked = check_generated(safety.model(), s.graph, winner.plan, s.target, policy)
    out = dict(report)
    summary = checked.summary
    if summary["ran"]:
        out["codegen_checked"] = summary["fused_groups"]
        out["skipped_codegen"] = checked.unfused
        if "fused" in out:
            out["fused"] -= checked.unfused
    s.study.set_user_attr("codegen_check", {k: v for k, v in summary.items() if k != "failing"})
    if checked.plan == winner.plan:
        return winner, out, dict(verdicts), summary
    safe = s.measure(checked.plan, f"{winner.source}, codegen-safe")
    if not safe.measured.ok:
        raise AutotuneError(
            f"the plan with its failing generated kernels unfused could not be simulated: "
            f"{safe.measured.error}"
        )
    return safe, out, {**verdicts, **checked.verdicts}, summary
