"""What a study records for its dashboard (optuna-dashboard, `autotune dashboard`): on the
study, what is tuned and against what; on each trial, what it chose, what the model predicts
and where it came from, with a note of its slowest kernels; at the end, what was measured and
which plan was saved (its file uploaded as an artifact beside the journal)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna

from autotune.tuner.ledger import publish
from autotune.tuner.records import Candidate
from autotune.tuner.session import Session
from search_space.space import FusionPlan, SpacePlan, kernel_names

__all__ = [
    "ORIGIN",
    "PARITY",
    "artifact_dir",
    "describe_outcome",
    "describe_study",
    "describe_trial",
    "param_labels",
    "plot_parity",
    "upload_artifact_file",
]

ORIGIN = "origin"  # trial user attribute: warm start, sampler, local search, retry
SLOWEST = 5  # kernels a trial's note lists
MEASURED_ROWS = 30  # measured candidates the study's note lists
LABEL_CHARS = 240  # a parameter's label (the dashboard cuts attributes at 1 KB)
# the exact optimum at a study's set-up, bounded in work, not in seconds, so that a busy
# machine reports the same figure: candidate groups (each zoo model at full size has fewer;
# llama3-8b 16,487), branch-and-bound nodes of each ILP solve, and a hang guard
OPTIMAL_CANDIDATES = 20_000
OPTIMAL_NODES = 20_000
OPTIMAL_GUARD_S = 600.0


def _set_all(study: optuna.Study, attrs: Mapping[str, Any]) -> None:
    """Study user attributes, each written only when it changes (a resume adds no lines);
    the study's attributes are read once, not once per key (one query each on an RDB)."""
    known = study.user_attrs
    for key, value in attrs.items():
        if known.get(key) != value:
            study.set_user_attr(key, value)


def describe_study(s: Session) -> None:
    """Metric names, and what the study tunes: model, fingerprint, target, precision, cost
    model, strategy, and the predicted latency of the none / greedy / max baselines."""
    names = ["latency_us", "peak_mem_mb"] if s.config.multi else ["latency_us"]
    if s.study.metric_names != names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            s.study.set_metric_names(names)
    about = {
        "model": s.name,
        "fingerprint": s.graph.fingerprint(),
        "ops": len(s.graph.ops),
        "target": s.target.spec.name,
        "precision": s.target.precision,
        "cost_model": s.config.cost,
        "strategy": s.config.strategy,
        "objective_means": "latency_us: the study's cost model's prediction of the plan (us)",
    }
    predicted: dict[str, float | None] = {
        k: round(s.ev.score(p), 3) for k, p in s.baselines.items()
    }
    known = s.study.user_attrs.get("baselines_predicted_us", {})
    predicted["optimal"] = known.get("optimal") if "optimal" in known else _optimal_us(s)
    labels = {f"param {name}": label for name, label in param_labels(s).items()}
    _set_all(s.study, {**about, "baselines_predicted_us": predicted, **labels})


def _optimal_us(s: Session) -> float | None:
    """The exact additive optimum's predicted latency, when it is found within the work
    bounds (``OPTIMAL_CANDIDATES``, ``OPTIMAL_NODES``; None otherwise)."""
    from search_space.space import OptimalUnavailable, baseline_plan

    if s.buckets is not None:  # the exact optimum is the top bucket's, not the range's
        return None
    try:
        plan = baseline_plan(
            "optimal",
            s.ctx,
            s.oracle,
            s.config.policy,
            optimal_time_limit=OPTIMAL_GUARD_S,
            optimal_max_candidates=OPTIMAL_CANDIDATES,
            optimal_node_limit=OPTIMAL_NODES,
        )
    except OptimalUnavailable:
        return None
    return round(s.ev.score(plan), 3)


def _label_configs(s: Session, trial: optuna.trial.Trial, plan: SpacePlan) -> None:
    """A label for each ``config/<signature> ...`` parameter the trial asked (joint
    strategy), the first time one is seen: which kernels it tiles and what its first indices
    mean."""
    known = s.study.user_attrs
    labels = {}
    names = kernel_names(s.graph, (g.ops for g in plan.groups))
    for g, name in zip(plan.groups, names, strict=True):
        key = s.space.config_param(g)
        if key not in trial.params or f"param {key}" in known:
            continue
        grid = s.oracle.grid(g)
        first = ", ".join(f"{i}: {c.short()}" for i, c in enumerate(grid[:3]))
        label = (
            f"tiles of {g.kind} kernels like {name}: an index into their {len(grid)} "
            f"feasible configs, ranked by the analytic model ({first}, ...)"
        )
        labels[f"param {key}"] = label[:LABEL_CHARS]
    _set_all(s.study, labels)


def param_labels(s: Session) -> dict[str, str]:
    """What each fusion parameter's name leaves out: its class key (what orders the
    parameters), the kind of fusion and its first edge's ops, and how many edges the class
    shares (repeated layers)."""
    out = {}
    for key, edges in s.space.classes.items():
        first = edges[0]
        more = f" (+{len(edges) - 1} like it)" if len(edges) > 1 else ""
        label = f"class {key}: {first.kind} fusion of {first.src} -> {first.dst}{more}"
        out[s.space.param_of[key]] = label[:LABEL_CHARS]
    return out


def describe_trial(s: Session, trial: optuna.trial.Trial, plan: SpacePlan) -> None:
    """The trial's fused groups, predicted latency and origin, and a note listing its slowest
    kernels (ops, kind, config, predicted us)."""
    from optuna_dashboard import save_note

    costs = s.ev.kernel_latencies(plan)
    if s.config.strategy == "joint":
        _label_configs(s, trial, plan)
    trial.set_user_attr("fused_groups", plan.fused_groups)
    trial.set_user_attr("predicted_us", round(float(sum(costs)), 3))
    if ORIGIN not in trial.user_attrs:
        trial.set_user_attr(ORIGIN, "sampler")
    order = sorted(range(len(costs)), key=lambda i: -costs[i])[:SLOWEST]
    lines = [
        f"### Trial {trial.number}: {len(plan.groups)} kernels, {plan.fused_groups} fused, "
        f"{sum(costs):.1f} us predicted ({s.ev.model.version})",
        "",
        "| kernel | ops | kind | config | predicted us |",
        "|---|---|---|---|---|",
    ]
    names = kernel_names(s.graph, (g.ops for g in plan.groups))
    for i in order:
        g, c = plan.groups[i], plan.configs[i]
        ops = ", ".join(g.ops[:4]) + (f" (+{len(g.ops) - 4})" if len(g.ops) > 4 else "")
        lines.append(f"| {names[i]} | {ops} | {g.kind} | {c.short()} | {costs[i]:.2f} |")
    save_note(trial, "\n".join(lines) + "\n")


def describe_outcome(
    s: Session,
    winner: Candidate,
    candidates: Sequence[Candidate],
    baseline_us: Mapping[str, float | None],
) -> None:
    """The plan saved, where it came from, and the baselines as simulated (user attributes);
    the study's note: a table of the measured candidates, best first (a trial, a descent, a
    rule; simulated and predicted us). The dashboard cuts attributes past 1 KB, so the list
    goes to the note; the plan file holds all of it. Then the measured study names the saved
    plan (:func:`~autotune.tuner.ledger.publish`)."""
    from optuna_dashboard import save_note

    measured: list[Candidate] = []
    keys: set[str] = set()
    for c in sorted((c for c in candidates if c.measured.ok), key=lambda c: c.latency_us):
        if c.plan.key() not in keys:  # each plan once (candidates repeat plans by source)
            keys.add(c.plan.key())
            measured.append(c)
    base = {k: round(v, 3) for k, v in baseline_us.items() if v is not None and math.isfinite(v)}
    saved = {
        "source": winner.source,
        "simulated_us": round(winner.latency_us, 3),
        "fused_groups": winner.plan.fused_groups,
    }
    attrs = {"baselines_simulated_us": base, "saved_plan": saved}
    _set_all(s.study, {**attrs, "measured_candidates": len(measured)})
    lines = [
        f"### Saved plan: {winner.source}, {winner.latency_us:.1f} us on the simulator",
        "",
        "Baselines (simulator): " + ", ".join(f"{k} {v:.1f} us" for k, v in base.items()),
        "",
        f"Measured candidates ({len(measured)}, best {MEASURED_ROWS} shown):",
        "",
        "| source | simulated us | predicted us | fused groups |",
        "|---|---|---|---|",
    ]
    for c in measured[:MEASURED_ROWS]:
        lines.append(
            f"| {c.source} | {c.latency_us:.2f} | {s.ev.score(c.plan):.2f} | "
            f"{c.plan.fused_groups} |"
        )
    save_note(s.study, "\n".join(lines) + "\n")
    publish(s, candidates, saved=winner)


PARITY = "parity"  # the id of the parity plot on the study's dashboard page


def plot_parity(s: Session, plan: FusionPlan) -> None:
    """Trust at a glance on the study's dashboard page: the saved plan's parity plot (each
    kernel's prediction against the simulator, the residuals per kernel kind: the report's,
    :func:`autotune.parity.parity`), replaced by each run of the study."""
    from optuna_dashboard import save_plotly_graph_object

    from autotune.parity import parity

    fig = parity(plan)
    if fig is not None:
        save_plotly_graph_object(s.study, fig, graph_object_id=PARITY)


def artifact_dir(storage_name: str) -> Path:
    """Where a study's artifacts go: ``<journal>.artifacts`` beside a journal file, else
    ``autotune-artifacts`` in the working directory (an RDB storage)."""
    if "://" in storage_name:
        return Path("autotune-artifacts")
    return Path(storage_name + ".artifacts")


def upload_artifact_file(
    storage_name: str, study_name: str, path: Path, mimetype: str = "application/json"
) -> str:
    """Upload a file (the saved plan, a fused model) as an artifact of the study (into
    :func:`artifact_dir`); its artifact id. ``storage_name``: the journal path or storage URL
    the study is in.

    Raises:
        AutotuneError: the storage holds no study of that name.
    """
    from optuna.artifacts import FileSystemArtifactStore, upload_artifact

    from autotune.exceptions import AutotuneError
    from autotune.tuner.study import journal_path, open_storage

    journal = journal_path(storage_name)
    if journal is not None and not journal.is_file():
        raise AutotuneError(f"storage '{journal}' does not exist; give the study's storage")
    storage, _ = open_storage(storage_name)
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise AutotuneError(
            f"storage '{storage_name}' has no study '{study_name}' (the one the plan names)"
        ) from None
    folder = artifact_dir(storage_name)
    folder.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return upload_artifact(
            artifact_store=FileSystemArtifactStore(str(folder)),
            file_path=str(path),
            study_or_trial=study,
            mimetype=mimetype,
        )
