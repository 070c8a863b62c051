"""The study's measured candidates, kept in its storage: the study's result is a function of
its storage.

Every plan a run measures (a trial's, a descent's, a rule's) is written to a study of its own,
``<study>:measured``, as a trial valued by its simulated latency, with the plan itself (groups
and configs) as an attribute. Before it picks, a run reads them back: every worker on one
storage, and a later ``autotune tune --trials 0`` on the same study, picks from the union of
what all of them measured. The tuner's own study is valued by predictions; the two scales stay
apart, and its sampler never sees measured values.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import optuna

from autotune.tuner.records import Candidate, MeasureResult
from autotune.tuner.session import Session
from autotune.tuner.study import measured_name
from costmodel.measure import SIMULATOR_VERSION
from search_space.exceptions import GraphError
from search_space.ir import KernelConfig, make_group
from search_space.space import SpacePlan, peak_live_bytes

__all__ = ["SAVED", "measured_study", "publish", "stored"]

log = logging.getLogger(__name__)
SAVED = "saved_plan_key"  # measured study's user attribute: the plan the last run saved
PLAN = "autotune:plan"  # measured trial's system attribute: [[ops, kind, config], ...]


def measured_study_name(s: Session) -> str:
    return measured_name(s.study_name)


def _measured_on(s: Session) -> str:
    """What a measured latency depends on besides the plan: the spec, the precision and the
    simulator's version."""
    return f"{s.target.spec.digest()}/{s.target.precision}/{SIMULATOR_VERSION}"


def measured_study(s: Session) -> optuna.Study:
    """The study of measured plans (made on first use), with its metric names."""
    directions = list(s.study.directions)
    study = optuna.create_study(
        storage=s.storage,
        study_name=measured_study_name(s),
        directions=directions,
        load_if_exists=True,
    )
    names = ["simulated_latency_us", "peak_mem_mb"][: len(directions)]
    if study.metric_names != names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)
    return study


def plan_to_attr(plan: SpacePlan) -> list[list[Any]]:
    """A plan as JSON-able lists: one [ops, kind, config] per group (a system attribute: the
    dashboard shows user attributes, and a whole plan is no reading there)."""
    return [
        [list(g.ops), g.kind, c.to_json()] for g, c in zip(plan.groups, plan.configs, strict=True)
    ]


def plan_from_attr(s: Session, data: Any) -> SpacePlan | None:
    """The plan :func:`plan_to_attr` wrote, or None when it does not fit this graph (another
    version of the tool, a hand-edited storage): it is then left out, never trusted."""
    try:
        groups, configs = [], []
        for ops, kind, config in data:
            groups.append(make_group(s.graph, [str(o) for o in ops], str(kind)))
            configs.append(KernelConfig.from_json(config))
    except (TypeError, ValueError, KeyError, AttributeError, GraphError):
        return None
    return SpacePlan(tuple(groups), tuple(configs))


def publish(s: Session, candidates: Iterable[Candidate], saved: Candidate | None = None) -> str:
    """Write the measured candidates not in the storage yet (each plan once) to the measured
    study; ``saved``: the plan this run saved, named in the study's attributes. Returns the
    measured study's name."""
    study = measured_study(s)
    seen = {t.user_attrs.get("plan_key") for t in study.trials}
    fuse = (
        optuna.distributions.IntDistribution(0, 1)
        if s.space.numeric
        else optuna.distributions.CategoricalDistribution([False, True])
    )
    multi = len(study.directions) > 1
    for c in [*candidates, *([saved] if saved is not None else [])]:
        key = c.plan.key()
        if not c.measured.ok or key in seen:
            continue
        seen.add(key)
        parts = [frozenset(n for n in g.ops if n in s.ctx.index) for g in c.plan.groups]
        params = {k: v for k, v in s.space.params_for(parts).items() if k.startswith("fuse/")}
        values = [c.latency_us]
        if multi:
            values.append(peak_live_bytes(s.graph, c.plan.groups) / 1e6)
        attrs = {
            "source": c.source,
            "plan_key": key,
            "measured_on": _measured_on(s),
            "predicted_us": round(s.ev.score(c.plan), 3),
            "kernels": len(c.plan.groups),
            "fused_groups": c.plan.fused_groups,
            **({"verdicts": s.checks[key]} if key in s.checks else {}),
        }
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=dict.fromkeys(params, fuse),
                values=values,
                user_attrs=attrs,
                system_attrs={PLAN: plan_to_attr(c.plan)},
            )
        )
    if saved is not None and study.user_attrs.get(SAVED) != saved.plan.key():
        study.set_user_attr(SAVED, saved.plan.key())
    if s.study.user_attrs.get("measured_study") != study.study_name:
        s.study.set_user_attr("measured_study", study.study_name)
    if study.user_attrs.get("measures") != s.study_name:
        study.set_user_attr("measures", s.study_name)
    return study.study_name


def stored(s: Session, have: Sequence[Candidate]) -> list[Candidate]:
    """The candidates the storage holds that ``have`` lacks (measured by other workers or
    earlier runs), in the order they were written; a plan that does not fit this graph is
    left out with a warning."""
    known = {c.plan.key() for c in have}
    out: list[Candidate] = []
    if s.storage is None:  # an in-memory study keeps nothing for others
        return out
    try:
        study = optuna.load_study(study_name=measured_study_name(s), storage=s.storage)
    except KeyError:
        return out
    skipped = 0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        key = t.user_attrs.get("plan_key")
        if key in known or PLAN not in t.system_attrs:
            continue
        if t.user_attrs.get("measured_on") != _measured_on(s):
            skipped += 1  # simulated on another spec, precision or simulator
            continue
        plan = plan_from_attr(s, t.system_attrs[PLAN])
        if plan is None or plan.key() != key:
            skipped += 1
            continue
        known.add(key)
        source = str(t.user_attrs.get("source", f"measured trial {t.number}"))
        out.append(Candidate(plan, MeasureResult(float(t.values[0])), source))
    if skipped:
        log.warning(
            "%d stored plans were left out: another model, spec, precision or simulator",
            skipped,
        )
    return out
