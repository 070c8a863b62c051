"""Measurement: one kernel as measured (a typed record), calibration tables of them as parquet
rows, and the least-squares fit of the analytic constants to them.

The rest of the package is imported by module: calibration runs on the simulator
(:mod:`.sample`, :mod:`.synthetic`, :mod:`.cluster`), a real NPU's profile (:mod:`.msprof`)
and real measured kernel times (:mod:`.real`).
"""

from __future__ import annotations

from costmodel.measure.fit import RowBatches, fit_constants
from costmodel.measure.record import (
    HARDWARE_VERSION,
    PROFILE_VERSION,
    SIMULATOR_VERSION,
    Measurement,
    Provenance,
    measurements,
)
from costmodel.measure.table import (
    MEASURED_PIPES,
    PIPE_COLUMNS,
    REQUIRED_COLUMNS,
    kernel_from_json,
    kernel_to_json,
    measured_pipes,
    measurements_of,
    merge_table,
    read_table,
    row_key,
    table_frame,
    target_tables,
    update_manifest,
    write_table,
)

__all__ = [
    "HARDWARE_VERSION",
    "MEASURED_PIPES",
    "PIPE_COLUMNS",
    "PROFILE_VERSION",
    "REQUIRED_COLUMNS",
    "SIMULATOR_VERSION",
    "Measurement",
    "Provenance",
    "RowBatches",
    "fit_constants",
    "kernel_from_json",
    "kernel_to_json",
    "measured_pipes",
    "measurements",
    "measurements_of",
    "merge_table",
    "read_table",
    "row_key",
    "table_frame",
    "target_tables",
    "update_manifest",
    "write_table",
]
