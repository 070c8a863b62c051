"""Calibration runs: sample kernels from real and synthetic models, run them on the simulator
into a calibration table, or read a real NPU's msprof op summary into one."""

from __future__ import annotations

from autotune.calibrate.msprof import CANN_TYPES, hardware_table, msprof_table, read_op_summary
from autotune.calibrate.sample import (
    DEFAULT_MODELS,
    WARM,
    Sample,
    calibrate_tables,
    run_on_simulator,
    sample_graph,
)
from autotune.calibrate.synthetic import synthetic_models

__all__ = [
    "CANN_TYPES",
    "DEFAULT_MODELS",
    "WARM",
    "Sample",
    "calibrate_tables",
    "hardware_table",
    "msprof_table",
    "read_op_summary",
    "run_on_simulator",
    "sample_graph",
    "synthetic_models",
]
