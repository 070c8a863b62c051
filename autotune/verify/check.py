"""Kernel numerics (docs/verification.md, level 2) and the safe-mode decision.

For every distinct signature among a plan's multi-op groups, once: extract the group on a few
rows, compute its outputs in float64 (the reference), emulate the fused kernel and the unfused
ops, and judge the fused kernel: cosine similarity, max abs and max rel error against the
reference within the policy's thresholds, and no more than ``error_factor`` times the error
the unfused ops make anyway. Failures are data: a kernel that cannot be checked is reported
with the reason, never an exception that stops the caller.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import onnx

from autotune.verify import extract
from autotune.verify.emulate import emulate
from autotune.verify.judge import compare, judge
from autotune.verify.numerics import numerics_for, numerics_key
from autotune.verify.reference import reference_outputs
from costmodel.lower import Lowering
from costmodel.spec import Target
from search_space.ir import FusionGroup, Graph, KernelConfig, empty_tensors, make_group
from search_space.rules import Policy
from search_space.space import PlanGroup

__all__ = [
    "KernelVerdict",
    "Status",
    "safe_groups",
    "verify_group",
    "verify_kernels",
]

log = logging.getLogger(__name__)


class Status(StrEnum):
    """What a kernel's check concluded: it passed, it could not be checked (``unverified``:
    kept fused and counted, unfused under ``strict_safety``; the reason is in the verdict
    text), or it failed (safe mode unfuses it)."""

    PASSED = "passed"
    UNVERIFIED = "unverified"
    FAILED = "failed"


@dataclass(frozen=True)
class KernelVerdict:
    """The numerics verdict of one kernel signature.

    Attributes:
        ops: the ops of the first group with this signature.
        signature: the group's structural signature.
        cosine, max_abs_err, max_rel_err: fused emulation vs the float64 reference (worst
            output); NaN when the kernel was not run.
        unfused_max_abs_err, unfused_cosine: the unfused ops' own errors against the same
            reference, at the same precision (what fusion is judged against).
        verdict: the text: ``ok``, ``ok (...)`` (kept, with a note) or ``fail: <check,
            values>``.
        status: the verdict as an enum (:class:`Status`).
        members: the ops of every plan group sharing the signature (what safe mode unfuses).
        views: ops of those groups that are views or constant-only (never kernels alone).
        rows: rows the check ran on (of ``full_rows``).
    """

    ops: tuple[str, ...]
    signature: str
    cosine: float
    max_abs_err: float
    max_rel_err: float
    unfused_max_abs_err: float
    verdict: str
    members: tuple[tuple[str, ...], ...] = ()
    views: tuple[str, ...] = ()
    rows: int = 0
    full_rows: int = 0
    unfused_cosine: float = math.nan
    status: Status = field(kw_only=True)

    @property
    def ok(self) -> bool:
        """Kept fused: passed, or not checkable (safe mode keeps what it cannot judge)."""
        return self.status is not Status.FAILED

    def kept(self, strict: bool = False) -> bool:
        """Kept fused by safe mode: :attr:`ok`, and under ``strict`` (``--strict-safety``)
        also checked."""
        return self.ok and not (strict and self.status is Status.UNVERIFIED)

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else float(x)

        return {
            "ops": list(self.ops),
            "signature": self.signature,
            "cosine": num(self.cosine),
            "max_abs_err": num(self.max_abs_err),
            "max_rel_err": num(self.max_rel_err),
            "unfused_max_abs_err": num(self.unfused_max_abs_err),
            "unfused_cosine": num(self.unfused_cosine),
            "verdict": self.verdict,
            "status": self.status.value,
            "rows": self.rows,
            "full_rows": self.full_rows,
        }


def _model_itemsize(sub: extract.Subgraph, graph: Graph) -> int:
    for t in (*sub.outputs, *sub.group.inputs):
        ten = graph.tensors[t]
        if ten.dtype.startswith(("float", "bfloat")):
            return ten.itemsize
    return 4


def _unfused_split_k(
    lowering: Lowering | None, graph: Graph, sub: extract.Subgraph, fallback: int
) -> dict[str, int]:
    """Each cube op's own default K chunk (unfused, every op runs its hand-written config)."""
    out: dict[str, int] = {}
    for node, name, unit in zip(sub.nodes, sub.group.ops, sub.units, strict=True):
        if unit != "cube" or node.op_type not in ("MatMul", "Gemm", "Conv"):
            continue
        try:
            assert lowering is not None
            out[name] = lowering.default(make_group(graph, [name], "single")).base_k
        except Exception as err:  # a lowering gap only changes the chunking
            log.debug("no default config for %s: %s", name, err)
            out[name] = fallback
    return out


def verify_group(
    source: extract.ModelSource,
    group: FusionGroup,
    config: KernelConfig | None,
    target: Target,
    policy: Policy,
    *,
    rows: int = 64,
    input_scale: float = 1.0,
    lowering: Lowering | None = None,
) -> KernelVerdict:
    """Check one fused group (see :func:`verify_kernels`)."""
    graph = source.graph
    sig = group.signature(graph)
    nan = math.nan
    try:
        sub = extract.extract_group(source, group, rows=rows, input_scale=input_scale)
        ref = reference_outputs(sub)
        item = _model_itemsize(sub, graph)
        num_f = numerics_for(target, item, config)
        num_u = numerics_for(target, item, None)
        split = _unfused_split_k(lowering, graph, sub, num_f.base_k)
        fused = emulate(sub, num_f, fused=True)
        unfused = emulate(sub, num_u, fused=False, split_k=split)
    except extract.SkipVerification as err:
        log.warning("kernel %s (%s..): %s; unverified", sig, group.ops[0], err)
        text = "unverified: not shrinkable and too large to run whole"
        return KernelVerdict(group.ops, sig, nan, nan, nan, nan, text, status=Status.UNVERIFIED)
    except Exception as err:  # a verification gap is data, not a crash
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        log.warning("kernel %s (%s..) could not be verified: %s", sig, group.ops[0], reason)
        text = f"unverified: {reason}"
        return KernelVerdict(group.ops, sig, nan, nan, nan, nan, text, status=Status.UNVERIFIED)
    floats = [t for t in sub.outputs if np.asarray(ref[t]).dtype.kind == "f"]
    errs_f = {t: compare(ref[t], fused[t]) for t in floats}
    errs_u = {t: compare(ref[t], unfused[t]) for t in floats}
    j = judge(errs_f, errs_u, policy)
    log.info(
        "kernel %s (%s, %d ops, %d/%d rows%s): cosine %.6f, max abs %.3g, unfused %.3g: %s",
        sig,
        group.kind,
        len(group.ops),
        sub.rows,
        sub.full_rows,
        f", {sub.note}" if sub.note else "",
        j.cosine,
        j.max_abs,
        j.unfused_max_abs,
        j.verdict,
    )
    return KernelVerdict(
        group.ops,
        sig,
        j.cosine,
        j.max_abs,
        j.max_rel,
        j.unfused_max_abs,
        j.verdict,
        rows=sub.rows,
        full_rows=sub.full_rows,
        unfused_cosine=j.unfused_cosine,
        status=Status.FAILED if j.failed else Status.PASSED,
    )


def _with_outliers(
    typical: KernelVerdict,
    source: extract.ModelSource,
    group: FusionGroup,
    config: KernelConfig | None,
    target: Target,
    policy: Policy,
    rows: int,
    lowering: Lowering,
) -> KernelVerdict:
    """The verdict once more on activations of ``policy.outlier_scale`` (the outliers of LLM
    hidden states reach hundreds, where fp16 sums of squares overflow); a failure there is the
    kernel's verdict, named by its scale, otherwise the typical-scale verdict stands."""
    big = verify_group(
        source,
        group,
        config,
        target,
        policy,
        rows=rows,
        input_scale=policy.outlier_scale,
        lowering=lowering,
    )
    if big.status is not Status.FAILED:
        return typical
    why = big.verdict.removeprefix("fail: ")
    return dataclasses.replace(big, verdict=f"fail at input scale {policy.outlier_scale:g}: {why}")


def verify_kernels(
    model: onnx.ModelProto,
    graph: Graph,
    groups: Sequence[PlanGroup],
    target: Target,
    policy: Policy,
    *,
    seed: int = 0,
    rows: int = 64,
    input_scale: float = 1.0,
    known: MutableMapping[tuple[str, Any], KernelVerdict] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[KernelVerdict]:
    """Check the numerics of every distinct fused kernel of a plan, once per signature.

    Args:
        model: the original model; groups name its nodes as ``search_space.onnx.node_names``.
        graph: the model's graph (``search_space.load_graph(model)``).
        groups: the plan's groups with their configs; single-op groups are not checked.
        target: the hardware target and its precision mode.
        policy: the thresholds (``cosine_min``, ``max_abs_err``, ``max_rel_err``,
            ``error_factor``).
        seed: seed of the random inputs (and of weights the model does not hold).
        rows: rows each check runs on (the group's leading axis is shrunk to about this).
        input_scale: standard deviation of the float activations drawn. A kernel that passes
            is checked again at ``policy.outlier_scale`` when that is larger.
        known: verdicts by (signature, :func:`numerics_key` of the config) from earlier
            calls on the same model, target and policy, reused instead of checked again (a
            study checks many plans that share kernels); new verdicts are added to it.
        progress: told (signatures done, signatures) after each.

    Returns:
        One verdict per distinct multi-op signature, in plan order.
    """
    if empty_tensors(graph):  # a model that does no work runs no kernel to check
        return []
    source = extract.ModelSource(model, graph, seed=seed)
    lowering = Lowering(graph, target)
    firsts: dict[str, tuple[FusionGroup, PlanGroup]] = {}
    members: dict[str, list[tuple[str, ...]]] = {}
    views: dict[str, set[str]] = {}
    for pg in groups:
        work = [n for n in pg.ops if not graph.op(n).is_view and not graph.op(n).constant]
        if len(work) < 2:
            continue
        fg = make_group(graph, pg.ops, pg.kind)
        sig = fg.signature(graph)
        firsts.setdefault(sig, (fg, pg))
        members.setdefault(sig, []).append(tuple(pg.ops))
        views.setdefault(sig, set()).update(n for n in pg.ops if n not in work)
    out = []
    cache = {} if known is None else known
    for k, (sig, (fg, pg)) in enumerate(firsts.items()):
        key = (sig, numerics_key(pg.config))
        v = cache.get(key)
        if v is None:
            log.debug("verifying kernel %d/%d: %s", k + 1, len(firsts), sig)
            v = verify_group(
                source,
                fg,
                pg.config,
                target,
                policy,
                rows=rows,
                input_scale=input_scale,
                lowering=lowering,
            )
            if v.status is Status.PASSED and policy.outlier_scale > input_scale:
                v = _with_outliers(v, source, fg, pg.config, target, policy, rows, lowering)
            cache[key] = v
        if progress is not None:
            progress(k + 1, len(firsts))
        out.append(
            dataclasses.replace(v, members=tuple(members[sig]), views=tuple(sorted(views[sig])))
        )
    return out


def safe_groups(
    groups: Iterable[PlanGroup], verdicts: Iterable[KernelVerdict], *, strict: bool = False
) -> tuple[list[PlanGroup], dict[str, int]]:
    """Safe mode: unfuse every group whose kernel signature failed (and, when ``strict``,
    every group whose kernel could not be verified).

    An unfused group becomes one single-op group per op that does work (views and
    constant-only ops are not kernels on their own), each carrying the reason as its verdict;
    every other group is kept, with its signature's verdict.

    Returns:
        The new groups and the counts for the report: ``fused`` (multi-op groups kept fused),
        ``unverified`` (of those, the ones no check could run on), ``skipped_precision``
        (unfused because their numerics failed) and ``skipped_unverified`` (unfused, under
        ``strict``, because they could not be checked).
    """
    by_ops: dict[tuple[str, ...], KernelVerdict] = {}
    for v in verdicts:
        for ops in v.members or (v.ops,):
            by_ops[tuple(ops)] = v
    kept: list[PlanGroup] = []
    counts = {"fused": 0, "unverified": 0, "skipped_precision": 0, "skipped_unverified": 0}
    for pg in groups:
        found = by_ops.get(tuple(pg.ops))
        unverified = found is not None and found.status is Status.UNVERIFIED
        if found is None:
            kept.append(pg)
        elif found.kept(strict):
            kept.append(PlanGroup(pg.ops, pg.kind, pg.config, found.verdict))
            counts["fused"] += 1
            counts["unverified"] += unverified
        else:
            counts["skipped_unverified" if unverified else "skipped_precision"] += 1
            reason = f"unfused: {found.verdict}"
            singles = [op for op in pg.ops if op not in found.views]
            kept.extend(PlanGroup((op,), "single", None, reason) for op in singles)
    return kept, counts
