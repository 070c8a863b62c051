"""Shared by the tuner tests: the small BERT graph they tune and a TuneConfig maker."""

from __future__ import annotations

from pathlib import Path

from autotune.tuner import TuneConfig
from search_space import load_graph
from search_space.zoo import build


def bert_graph():
    """Two layers of BERT-base at a quarter of its size, weights as graph inputs."""
    return load_graph(build("bert-base", weights="inputs", layers=2, scale=0.25))


def _cfg(tmp_path: Path, **kw) -> TuneConfig:
    base = {"trials": 12, "measure_every": 5, "storage": str(tmp_path / "s.journal")}
    if "://" in str(kw.get("storage", "")) and "dataset" not in kw:
        # a storage URL puts its rows in the working folder: a test keeps them in its own
        base["dataset"] = str(tmp_path / "rows.parquet")
    return TuneConfig(**{**base, **kw})
