"""``autotune candidates``: what fusion would buy, without tuning (the benefit analysis).

For every candidate group (each rule match, and each group of the ``max`` plan no rule
covers), named as a kernel is (``search_space.space.kernel_names``): HBM bytes and estimated
time before -> after, launches saved, buffer footprint vs capacity, and a verdict: ``fuse``,
``skip: buffer overflow``, ``skip: below benefit_threshold``, ``skip: policy`` or ``skip:
illegal``. Plus why rules did not fire where a user might expect them to.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from costmodel.oracle import CostOracle
from costmodel.spec import Target
from search_space.fusion import FusionContext
from search_space.ir import Graph, empty_tensors, make_group
from search_space.rules import Policy, match, policy_rules, unmatched_report
from search_space.space import SearchSpace, kernel_names

__all__ = ["CandidateVerdict", "analyse_candidates"]

BUFFERS = ("l1", "l0a", "l0b", "l0c", "ub")


class CandidateVerdict(StrEnum):
    """What becomes of a candidate group (the value is what the JSON and tables show)."""

    FUSE = "fuse"
    LOW_BENEFIT = "skip: below benefit_threshold"
    BUFFER_OVERFLOW = "skip: buffer overflow"
    POLICY = "skip: policy"
    ILLEGAL = "skip: illegal"


def _verdict(
    ctx: FusionContext, oracle: CostOracle, policy: Policy, ops: frozenset[str], rule: str
) -> tuple[CandidateVerdict | None, str]:
    """Why a candidate cannot fuse (None when nothing but its benefit stands in the way)."""
    graph = ctx.graph
    if policy.fusion_level == 0:
        return CandidateVerdict.POLICY, "fusion_level = 0"
    if policy.mode(rule) == "never":
        return CandidateVerdict.POLICY, f"pattern '{rule}' is set to never"
    banned = sorted(n for n in ops if not ctx.fusible(graph.op(n)))
    if banned:
        return (
            CandidateVerdict.POLICY,
            f"{graph.op(banned[0]).op_type} never fuses (no_fusion_ops/opaque)",
        )
    if len(ops) > ctx.max_fused_ops:
        return CandidateVerdict.POLICY, f"more than max_fused_ops={ctx.max_fused_ops} ops"
    verdict = ctx.check(ops)
    if not verdict.ok:
        return CandidateVerdict.ILLEGAL, verdict.reason
    if not oracle.feasible(ops):
        return CandidateVerdict.BUFFER_OVERFLOW, "no tiling of the fused kernel fits the buffers"
    return None, ""


def analyse_candidates(
    graph: Graph, target: Target, policy: Policy | None = None
) -> dict[str, Any]:
    """The benefit analysis ``autotune candidates --json`` prints (nothing to fuse in a model
    with an empty tensor: it does no work)."""
    policy = policy or Policy()
    ctx = FusionContext(graph, policy.no_fusion_ops, policy.max_fused_ops)
    if empty_tensors(graph):
        none = {"with_sharing": 0, "without_sharing": 0}
        return {
            "edges": len(ctx.edges),
            "edge_classes": 0,
            "decision_vars": none,
            "kernels_unfused": len(ctx.nodes),
            "preset": policy.preset,
            "candidates": [],
            "rules_not_fired": [],
            "buffer_bytes": _capacities(target),
        }
    oracle = CostOracle(graph, target, ctx=ctx)
    rules = policy_rules(policy)
    found: dict[frozenset[str], str] = {}
    for m in match(ctx, rules):
        found.setdefault(m.ops, m.rule)
    for part in ctx.repair(ctx.edges, oracle.feasible):
        if len(part) > 1:
            found.setdefault(part, "max")
    ordered = sorted(found.items(), key=lambda kv: min(ctx.index[n] for n in kv[0]))
    names = kernel_names(graph, (sorted(ops, key=ctx.index.__getitem__) for ops, _ in ordered))
    rows = [
        _candidate(ctx, oracle, policy, ops, rule, name)
        for (ops, rule), name in zip(ordered, names, strict=True)
    ]
    shared = SearchSpace(ctx, oracle)
    unshared = SearchSpace(ctx, oracle, share=False)
    return {
        "edges": len(ctx.edges),
        "edge_classes": shared.decision_vars,
        "decision_vars": {
            "with_sharing": shared.decision_vars,
            "without_sharing": unshared.decision_vars,
        },
        "kernels_unfused": len(ctx.nodes),
        "preset": policy.preset,
        "candidates": rows,
        "rules_not_fired": unmatched_report(ctx, rules),
        "buffer_bytes": _capacities(target),
    }


def _candidate(
    ctx: FusionContext,
    oracle: CostOracle,
    policy: Policy,
    ops: frozenset[str],
    rule: str,
    name: str,
) -> dict[str, Any]:
    """One candidate group's row: its ops unfused, then (where it is legal) fused at its best
    config, its benefit and verdict."""
    graph, low = ctx.graph, oracle.lowering
    singles = [make_group(graph, [n]) for n in ops]
    before_us = sum(oracle.best(s)[1] for s in singles)
    before_bytes = sum(low.kernel(s, oracle.default(s)).compulsory_bytes for s in singles)
    row: dict[str, Any] = {
        "name": name,
        "ops": sorted(ops, key=ctx.index.__getitem__),
        "rule": rule,
        "launches_saved": len(ops) - 1,
        "unfused_predicted_us": before_us,
        "hbm_bytes_before": before_bytes,
    }
    verdict, reason = _verdict(ctx, oracle, policy, ops, rule)
    if verdict is None:
        group = ctx.group(ops)
        config, after_us = oracle.best(group)
        kernel = low.kernel(group, config)
        row.update(
            fused_predicted_us=after_us,
            hbm_bytes_after=kernel.compulsory_bytes,
            config=config.to_json(),
            footprint={b: kernel.footprint[b] for b in BUFFERS if b in kernel.footprint},
        )
        gain = (before_us - after_us) / before_us if before_us > 0 else 0.0
        row["benefit"] = gain
        if gain < max(policy.benefit_threshold, 1e-9):
            verdict = CandidateVerdict.LOW_BENEFIT
            reason = f"saves {gain:.1%} (threshold {policy.benefit_threshold:.1%})"
        else:
            verdict = CandidateVerdict.FUSE
            reason = f"saves {before_us - after_us:.1f} us ({gain:.1%})"
    row["verdict"], row["reason"] = verdict, reason
    return row


def _capacities(target: Target) -> dict[str, int]:
    """Each on-chip buffer's capacity in bytes (what a candidate's ``footprint`` fills)."""
    return {b: int(getattr(target.spec, f"{b}_bytes")) for b in BUFFERS}
