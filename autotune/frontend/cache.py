"""The plan cache of ``optimize()`` and the torch.compile backend: a tuned plan and its
generated kernels per (graph, target, policy), on disk.

An entry's key is a hash of the exported graph's fingerprint (its ops, shapes and types: a
new shape is a new graph), the hardware spec's every field with the precision mode, and the
policy. The plan is written atomically (``autotune.plan_file.save_plan``) and read back with
every check a plan file gets, against the graph it is for; a damaged entry is reported, ignored and
replaced, never trusted. The kernels are regenerated from the plan when their package is
missing or unreadable (generation takes a fraction of a second; the study is what the cache
saves).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from autotune.plan_file import read_plan, save_plan
from costmodel.spec import Target
from search_space import Graph
from search_space.rules import Policy
from search_space.space import FusionPlan, PlanError

__all__ = ["PlanCache", "cache_root"]

log = logging.getLogger(__name__)
SCHEMA = 1  # bump when what an entry holds changes meaning


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$AUTOTUNE_CACHE_DIR``, else the user's cache directory
    (``$XDG_CACHE_HOME/autotune``, ``~/.cache/autotune``)."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("AUTOTUNE_CACHE_DIR"):
        return Path(os.environ["AUTOTUNE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "autotune"


@dataclass(frozen=True)
class PlanCache:
    """Plans under ``root/plans``, their kernel packages under ``root/kernels``."""

    root: Path

    def key(self, graph: Graph, target: Target, policy: Policy) -> str:
        doc = {
            "schema": SCHEMA,
            "graph": graph.fingerprint(),
            "spec": dataclasses.asdict(target.spec),
            "precision": target.precision,
            "policy": policy.to_json(),
        }
        text = json.dumps(doc, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def plan_path(self, key: str) -> Path:
        return self.root / "plans" / f"{key}.json"

    def kernels_path(self, key: str) -> Path:
        return self.root / "kernels" / key

    def load(self, key: str, graph: Graph) -> FusionPlan | None:
        """The cached plan for ``key``, checked against ``graph``; None when there is none
        or it is damaged (reported)."""
        path = self.plan_path(key)
        if not path.exists():
            return None
        try:
            return read_plan(path, graph)
        except PlanError as err:
            log.warning("ignoring the damaged plan cache entry %s: %s", path, err)
            return None

    def store(self, key: str, plan: FusionPlan) -> Path:
        """Write ``plan`` under ``key`` (atomically: a killed process leaves the old entry
        or none)."""
        path = self.plan_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return save_plan(plan, path)
