"""Calibration data and fits: tables of simulated (or measured) kernel runs as parquet rows,
and the least-squares fit of the analytic constants to them."""

from __future__ import annotations

from costmodel.measure.fit import RowBatches, fit_constants
from costmodel.measure.table import (
    MEASURED_PIPES,
    PIPE_COLUMNS,
    REQUIRED_COLUMNS,
    SIMULATOR_VERSION,
    kernel_from_json,
    kernel_to_json,
    measured_pipes,
    measurement_rows,
    read_table,
    target_tables,
    update_manifest,
    write_table,
)

__all__ = [
    "MEASURED_PIPES",
    "PIPE_COLUMNS",
    "REQUIRED_COLUMNS",
    "SIMULATOR_VERSION",
    "RowBatches",
    "fit_constants",
    "kernel_from_json",
    "kernel_to_json",
    "measured_pipes",
    "measurement_rows",
    "read_table",
    "target_tables",
    "update_manifest",
    "write_table",
]
