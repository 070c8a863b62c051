"""`autotune calibrate`: sample kernels, run them on the simulator, write a calibration table.

Kernels come from the groups of real models (every single op, the rule-based greedy groups,
max fusion and a few random legal partitions) and from synthetic corner-case models, each
lowered under its default config, the analytic model's favourite and random configs of its
legal grid. Most kernels run alone on a cold L2; a share of the rows (``warm``) runs each
kernel right after the kernels before it in its plan, so its inputs may be in L2, as they are
when a tuning study measures a whole plan (the row records the resident fractions the
calibrated analytic model assigns, as a study's rows do). Simulator noise is off.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from costmodel.analytic import AnalyticConstants, AnalyticModel
from costmodel.base import CostModel, KernelCost
from costmodel.exceptions import InfeasibleConfig
from costmodel.kernel import Kernel
from costmodel.measure.record import SIMULATOR_VERSION, Measurement, Provenance, measurements
from costmodel.measure.table import update_manifest, write_table
from costmodel.oracle import CostOracle
from costmodel.simulator import SimulatorModel
from costmodel.spec import HardwareSpec, Target
from search_space.fusion import FusionContext
from search_space.ir import Graph
from search_space.rules import Policy
from search_space.space import baseline_partition

__all__ = ["DEFAULT_MODELS", "Sample", "calibrate_tables", "run_on_simulator", "sample_graph"]

log = logging.getLogger(__name__)

DEFAULT_MODELS = (
    "zoo:bert-base",
    "zoo:gpt2",
    "zoo:llama3-8b",
    "zoo:transformer-base",
    "zoo:vit-b16",
    "zoo:resnet50",
    "zoo:mobilenetv3",
    "synthetic",
)
MAX_WORK = 40_000  # tiles x steps: random configs beyond this take seconds each to simulate
CONTEXT = 2  # kernels run before a warm sample (its plan's previous ones, most inputs' producers)
WARM = 0.2  # the default share of rows run in plan context


@dataclass(frozen=True)
class Sample:
    """One kernel to run, with where it came from."""

    kernel: Kernel
    family: str
    source: str
    rank: int  # 0 = default config, 1 = analytic favourite, 2.. = random
    before: tuple[Kernel, ...] = ()  # run first, on the same L2 (a warm sample's plan context)
    resident: tuple[float, ...] = ()  # per load stream, the tensor's fraction in L2 (warm)

    @property
    def context(self) -> list[float]:
        """The row's resident fractions: all zero for a cold run."""
        loads = sum(1 for s in self.kernel.streams if s.is_load)
        return list(self.resident) if self.before else [0.0] * loads


def _partitions(ctx: FusionContext, oracle: CostOracle, rng: random.Random, n_random: int):
    policy = Policy()
    yield [frozenset([n]) for n in ctx.nodes]
    yield baseline_partition("greedy", ctx, oracle, policy)
    yield baseline_partition("max", ctx, oracle, policy)
    edges = list(ctx.edges)
    for _ in range(n_random):
        p = rng.uniform(0.2, 0.8)
        yield ctx.repair([e for e in edges if rng.random() < p], oracle.feasible)


def sample_graph(
    graph: Graph,
    target: Target,
    *,
    family: str,
    source: str,
    rng: random.Random,
    seen: set[str],
    configs_per_group: int = 6,
    random_partitions: int = 3,
) -> list[Sample]:
    """Cold samples of every group signature of ``graph`` not in ``seen`` (which is updated),
    and warm ones: each group of a sampled plan whose inputs the ``CONTEXT`` kernels before it
    leave (partly) in L2, at the default and the favourite configs (the plan's other groups
    likewise), once per signature, config and resident fractions (``seen`` again)."""
    ctx = FusionContext(graph)
    raw = AnalyticModel(target, AnalyticConstants())
    residency = AnalyticModel(target)  # the L2 context a study's rows record
    oracle = CostOracle(graph, target, model=raw, ctx=ctx)
    out: list[Sample] = []
    for partition in _partitions(ctx, oracle, rng, random_partitions):
        groups = ctx.to_groups(partition)
        out += _warm(groups, oracle, residency, family, source, seen)
        for group in groups:
            sig = oracle.lowering.signature(group)
            if sig in seen:
                continue
            seen.add(sig)
            try:
                grid = oracle.grid(group)
            except InfeasibleConfig:
                continue
            default = oracle.default(group)
            picks = [default, grid[0]]
            light = [c for c in grid if c not in picks]
            rng.shuffle(light)
            for c in light:
                if len(picks) >= configs_per_group:
                    break
                k = oracle.lowering.kernel(group, c)
                if k.tiles * max(1, k.steps) <= MAX_WORK:
                    picks.append(c)
            for rank, c in enumerate(dict.fromkeys(picks)):
                out.append(Sample(oracle.lowering.kernel(group, c), family, source, rank))
    return out


def _warm(
    groups: Sequence[Any],
    oracle: CostOracle,
    residency: AnalyticModel,
    family: str,
    source: str,
    seen: set[str],
) -> list[Sample]:
    """A plan's groups in the context of the ``CONTEXT`` kernels before each (see
    :func:`sample_graph`), where that leaves any of its inputs in L2."""
    out: list[Sample] = []
    for rank, pick in enumerate((oracle.default, lambda g: oracle.grid(g)[0])):
        try:
            kernels = [oracle.lowering.kernel(g, pick(g)) for g in groups]
        except InfeasibleConfig:
            continue
        for i in range(1, len(kernels)):
            k, before = kernels[i], tuple(kernels[max(0, i - CONTEXT) : i])
            if any(x.tiles * max(1, x.steps) > MAX_WORK for x in (*before, k)):
                continue
            # what the context that runs before it leaves in L2 (not the whole plan's prefix)
            res = residency.residency([*before, k])[-1]
            key = f"{k.signature}|{k.config.short()}|{json.dumps([round(r, 6) for r in res])}"
            if not any(res) or key in seen:
                continue
            seen.add(key)
            out.append(Sample(k, family, source, rank, before, tuple(res)))
    return out


def _budget(samples: Sequence[Sample], n: int, rng: random.Random) -> list[Sample]:
    """At most ``n`` samples, covering as many signatures as possible: every signature's
    default first, then every signature's next config, and so on (for warm samples: the
    default plan's, then the favourite's)."""
    if n <= 0:
        return []  # and no draw from ``rng``: --warm 0 picks the cold rows it always did
    if len(samples) <= n:
        return list(samples)
    by_rank: dict[int, list[Sample]] = {}
    for s in samples:
        by_rank.setdefault(s.rank, []).append(s)
    out: list[Sample] = []
    for rank in sorted(by_rank):
        layer = by_rank[rank]
        rng.shuffle(layer)
        out.extend(layer[: n - len(out)])
        if len(out) >= n:
            break
    return out


CHUNK = 4  # kernel runs per task: amortises a task's round trip, keeps progress fine-grained

_LOCAL = threading.local()  # the simulators this worker process (and thread) has built


def _simulator(spec: dict[str, Any], digest: str, precision: str) -> CostModel:
    """This worker's simulator of the target, built from the spec on first use: each worker
    of an executor (a process pool's, a Dask cluster's) makes its own, once per target."""
    sims: dict[tuple[str, str], CostModel] = _LOCAL.__dict__.setdefault("sims", {})
    key = (digest, precision)
    if key not in sims:
        sims[key] = SimulatorModel(Target(HardwareSpec(**spec), precision))
    return sims[key]


def _simulate(
    spec: dict[str, Any], digest: str, precision: str, runs: Sequence[Sequence[Kernel]]
) -> list[dict[str, Any]]:
    """One task: the cost of each run's last kernel, as plain data. A pure function of its
    arguments (noise off, a fresh L2 per run), so a task run twice, as an executor reruns
    one whose worker died, gives the same rows."""
    sim = _simulator(spec, digest, precision)
    return [asdict(sim.evaluate(run)[-1]) for run in runs]


def run_on_simulator(
    kernels: Sequence[Kernel | Sequence[Kernel]],
    target: Target,
    *,
    jobs: int = 1,
    executor: Executor | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[KernelCost]:
    """Each kernel alone on a cold L2, or (a sequence) the last one after the others on one
    L2, noise off, in order.

    The runs go in tasks of ``CHUNK`` through ``executor.map`` (any ``concurrent.futures``
    executor: a process pool, a Dask client's), or without one through ``jobs`` worker
    processes (1: this process); the results are the same whichever runs them.
    """
    runs = [[k] if isinstance(k, Kernel) else list(k) for k in kernels]
    chunks = [runs[i : i + CHUNK] for i in range(0, len(runs), CHUNK)]
    task = partial(_simulate, target.spec.to_dict(), target.spec.digest(), target.precision)
    if executor is not None:
        return _collect(executor.map(task, chunks), progress)
    if jobs <= 1:
        return _collect(map(task, chunks), progress)
    with ProcessPoolExecutor(jobs) as pool:
        return _collect(pool.map(task, chunks), progress)


def _collect(
    results: Iterable[list[dict[str, Any]]], progress: Callable[[int], None] | None
) -> list[KernelCost]:
    out = []
    for chunk in results:
        out += [KernelCost(**c) for c in chunk]
        if progress:
            progress(len(chunk))
    return out


def calibrate_tables(
    sources: Iterable[tuple[str, str, Graph]],
    target: Target,
    out: str | Path,
    *,
    samples: int,
    seed: int,
    warm: float = WARM,
    jobs: int = 1,
    executor: Executor | None = None,
    command: str = "",
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Sample kernels of ``sources`` ((source, family, graph) triples), simulate them and
    write the table to ``out`` (plus its entry in the MANIFEST.json beside it). Up to
    ``warm`` of the ``samples`` rows are warm (plan context), the rest cold. The simulations
    run in ``jobs`` processes or on ``executor`` (:func:`run_on_simulator`).

    Returns:
        A summary: rows, warm rows, signatures, families, path.
    """
    if not 0.0 <= warm <= 1.0:
        raise ValueError(f"warm must be a fraction in [0, 1], but got {warm}")
    rng = random.Random(seed)
    seen: set[str] = set()
    pool: list[Sample] = []
    for source, family, graph in sources:
        pool += sample_graph(graph, target, family=family, source=source, rng=rng, seen=seen)
    hot = _budget([s for s in pool if s.before], round(samples * warm), rng)
    chosen = _budget([s for s in pool if not s.before], samples - len(hot), rng) + hot
    if on_total:
        on_total(len(chosen))
    runs = [(*s.before, s.kernel) for s in chosen]
    costs = run_on_simulator(runs, target, jobs=jobs, executor=executor, progress=progress)
    run = Provenance.of(target, seed=seed)
    records: list[Measurement] = []
    for s, c in zip(chosen, costs, strict=True):
        records += measurements(
            [s.kernel],
            [c],
            [s.context],
            replace(run, source=s.source, family=s.family),
            # configs are ranked within one context, as a study's rows are
            group_ids=[f"{s.kernel.signature}|{json.dumps(s.context)}"] if s.before else None,
        )
    out = Path(out)
    n = write_table(records, out)
    families = sorted({s.family for s in chosen})
    update_manifest(
        out.parent / "MANIFEST.json",
        out,
        {
            "rows": n,
            "signatures": len({s.kernel.signature for s in chosen}),
            "target": target.spec.name,
            "spec_digest": target.spec.digest(),
            "precision": target.precision,
            "simulator_version": SIMULATOR_VERSION,
            "seed": seed,
            "warm_rows": len(hot),
            "families": families,
            "command": command,
        },
    )
    signatures = len({s.kernel.signature for s in chosen})
    return {
        "rows": n,
        "warm_rows": len(hot),
        "signatures": signatures,
        "families": families,
        "path": str(out),
    }
