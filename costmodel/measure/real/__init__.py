"""Real measured Ascend kernel times: rows read from CSV (``datasets/real/``), each turned into
a one-kernel model, and the cost models' accuracy against them."""

from __future__ import annotations

from costmodel.measure.real.evaluate import MODELS, RealPrediction, predict_rows
from costmodel.measure.real.kernels import KERNELS, one_kernel
from costmodel.measure.real.rows import (
    FAMILIES,
    RealRow,
    RowProblem,
    family_of,
    parse_dims,
    parse_row,
    parse_tensors,
    read_real,
    target_of,
)
from costmodel.measure.real.scores import metrics, summarize

__all__ = [
    "FAMILIES",
    "KERNELS",
    "MODELS",
    "RealPrediction",
    "RealRow",
    "RowProblem",
    "family_of",
    "metrics",
    "one_kernel",
    "parse_dims",
    "parse_row",
    "parse_tensors",
    "predict_rows",
    "read_real",
    "summarize",
    "target_of",
]
