"""What a study writes: the plan record with its report (per-kernel rows, the candidate
census, where the winner came from)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.candidates import CandidateVerdict, analyse_candidates
from autotune.graph_view import kernel_graph
from autotune.tuner.config import TuneConfig
from autotune.tuner.ranges import RangeEvaluator
from autotune.tuner.records import Candidate, TuneResult
from autotune.tuner.session import Session
from costmodel.spec import load_target
from search_space.ir import Graph, empty_tensors, singleton_groups
from search_space.shapes import structure_digest
from search_space.space import FusionPlan, PlanBucket, PlanGroup, SpacePlan, op_hashes

__all__ = ["bucket_table", "census", "graph_record", "kernel_rows", "no_work", "plan_record"]


def kernel_rows(s: Session, plan: SpacePlan) -> list[dict[str, Any]]:
    """Per kernel of the final plan: simulated latency and bound, the study's model's
    prediction of it, and what its ops cost unfused (each op alone at its default config,
    predicted), for the report."""
    kernels = s.ev.kernels(plan)
    costs = s.ev.simulator.evaluate(kernels)
    predicted = s.ev.kernel_latencies(plan)
    rows = []
    for g, k, c, p in zip(plan.groups, kernels, costs, predicted, strict=True):
        ops = [n for n in g.ops if n in s.ctx.index]
        before = sum(s.oracle.default_cost(s.ctx.group([n])) for n in ops)
        rows.append(
            {
                "simulated_us": c.latency_us,
                "predicted_us": p,
                "unfused_predicted_us": before,
                "bound": c.bound,
                "unit": k.unit,
                "footprint": dict(k.footprint),
                "flops": float(k.flops),
                "hbm_bytes": float(c.hbm_bytes),
            }
        )
    return rows


def graph_record(s: Session) -> dict[str, Any]:
    """The kernel graph the plan's groups are drawn on (``report --html``): :func:`kernel_graph`
    and each op's structural hash (repeated layers share them)."""
    same = op_hashes(s.ctx)
    return {
        **kernel_graph(s.ctx),
        "same": [same[n] for n in s.ctx.nodes],  # equal in repeated layers (a folded view)
    }


def census(s: Session) -> dict[str, int]:
    """How many candidate fusions were skipped for low benefit or buffer overflow."""
    found = analyse_candidates(s.graph, s.target, s.config.policy)["candidates"]
    verdicts = [c["verdict"] for c in found]
    return {
        "skipped_low_benefit": verdicts.count(CandidateVerdict.LOW_BENEFIT),
        "skipped_buffer_overflow": verdicts.count(CandidateVerdict.BUFFER_OVERFLOW),
    }


def plan_record(
    s: Session,
    winner: Candidate,
    candidates: Sequence[Candidate],
    baseline_us: Mapping[str, float | None],
    report: Mapping[str, int],
    verdicts: Mapping[tuple[str, ...], str],
    compared_with: Mapping[str, str],
) -> FusionPlan:
    """The plan file's record: groups with configs and verdicts, predicted and measured
    latency, and the study's report in ``meta``; ``compared_with`` names the plan behind
    each baseline (``greedy, safe``: greedy with its failing kernels unfused)."""
    cfg = s.config
    plan = winner.plan
    trials = len(s.complete())
    meta: dict[str, Any] = {
        "study": s.study_name,
        "storage": s.storage_name,
        "trials": trials,
        "target_source": cfg.target,
        "sets": list(cfg.sets),
        "sampler": cfg.sampler,
        "strategy": cfg.strategy,
        "seed": cfg.seed,
        "source": winner.source,
        "candidates": [c.to_json() for c in candidates],
        "baseline_simulated_us": dict(baseline_us),
        "compared_with": dict(compared_with),
        "baseline_predicted_us": {k: s.ev.score(s.baselines[k]) for k in ("none", "greedy")},
        "objective": cfg.objective,
        "safe_mode": dict(report),
        "kernels": kernel_rows(s, plan),
        "graph": graph_record(s),
        "cost_model": {"kind": cfg.cost, "version": s.ev.model.version, "refits": s.ev.refits},
        "measurements": {"rows": len(s.ev.rows), "file": str(s.dataset)},
    }
    groups = tuple(
        PlanGroup(g.ops, g.kind, c, verdicts.get(g.ops, ""))
        for g, c in zip(plan.groups, plan.configs, strict=True)
    )
    ranges, buckets = bucket_table(s, plan)
    return FusionPlan(
        fingerprint=s.graph.fingerprint(),
        target=s.target.spec.name,
        groups=groups,
        precision=s.target.precision,
        name=s.name,
        predicted_us=s.ev.score(plan),
        measured_us=winner.latency_us,
        cost_model=cfg.cost,
        meta=meta,
        shape_ranges=ranges,
        buckets=buckets,
        structure=structure_digest(s.graph) if buckets else "",
        dim_axes=s.buckets.axes if s.buckets is not None else (),
    ).named(s.graph)


def bucket_table(s: Session, plan: SpacePlan) -> tuple[tuple[str, ...], tuple[PlanBucket, ...]]:
    """A range study's dispatch table: every bucket's configs for the plan's groups as they
    were simulated, with the bucket's predicted and simulated latency (none for one shape)."""
    ev = s.ev
    if s.buckets is None or not isinstance(ev, RangeEvaluator):
        return (), ()
    ev.measure(plan)  # a plan another worker measured: simulated here too (cached)
    rows = []
    for (bp, simulated), b in zip(ev.measured_at.get(plan.key(), []), ev.buckets, strict=True):
        at = bp.plan
        configs = tuple(at.configs) if at is not None else (None,) * len(plan.groups)
        predicted = b.ev.score(at) if at is not None else None
        rows.append(PlanBucket(bp.bucket.dims, bp.bucket.weight, configs, predicted, simulated))
    return tuple(str(r) for r in s.buckets.ranges.ranges), tuple(rows)


def no_work(graph: Graph, config: TuneConfig, name: str) -> TuneResult:
    """The result for a model with an empty tensor: it does no work, so there is nothing to
    search (no study is opened): each op alone, 0 us, and the plan says why."""
    target = load_target(config.target, config.sets, config.precision)
    empty = empty_tensors(graph)[0]
    why = f"tensor '{empty.name}' {list(empty.shape or ())} is empty: the model does no work"
    plan = FusionPlan(
        fingerprint=graph.fingerprint(),
        target=target.spec.name,
        groups=tuple(PlanGroup(g.ops, g.kind, None) for g in singleton_groups(graph)),
        precision=target.precision,
        name=name,
        predicted_us=0.0,
        measured_us=0.0,
        cost_model=config.cost,
        meta={
            "source": "no work",
            "note": why,
            "target_source": config.target,
            "sets": list(config.sets),
            "safe_mode": {},
            "trials": 0,
        },
    ).named(graph)
    return TuneResult(
        plan=plan,
        study="",
        storage="",
        trials=0,
        best_latency_us=0.0,
        baseline_us={"none": 0.0, "greedy": 0.0},
        predicted_us=0.0,
    )
