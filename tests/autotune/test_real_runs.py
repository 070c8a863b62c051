"""How a real row is run: on the cores its ``block_dim`` names, and as CANN's library kernel
(with the library prologue) or as a kernel written for its shape."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from real_helpers import real_row as _row

from costmodel import load_target, make_cost_model
from costmodel.measure.real import read_real
from costmodel.measure.real.evaluate import (
    library_pairs,
    library_prologue_us,
    lowered,
    measured_config,
    model_makers,
    predict_row,
)
from costmodel.measure.real.records import real_measurements

REAL = Path(__file__).resolve().parents[2] / "datasets" / "real" / "ascend_kernels.csv"


# the cores a block_dim cell names: one number for the row, with or without a unit and a
# remark in parentheses; a range or a number under a condition names none
CELLS = {
    "6": 6,
    "6.0": 6,
    "6 AIV": 6,
    "6 AIV cores": 6,
    "6AIV": 6,
    "6 AIV (per README)": 6,
    "6 AIV (min(rows, 6) per README)": 6,
    "20 AIC": 20,
    "6 AIV for small shapes (per README)": None,
    "4-6 AIV": None,
    "AIV 6": None,
    "": None,
}


@pytest.mark.parametrize(("cell", "cores"), list(CELLS.items()))
def test_a_block_dim_cell_names_cores_only_where_it_states_one_number(
    cell: str, cores: int | None
) -> None:
    assert _row("SwiGlu", "x=[2,512,1024]", block_dim=cell).block_dim == cores


# "4096" states more cores than the chip has: the row runs on its own
@pytest.mark.parametrize(
    ("cell", "stated"),
    [
        ("6", True),
        ("6 AIV (per README)", True),
        ("6 AIV for small shapes", False),
        ("4096", False),
        ("", False),
    ],
)
def test_the_evaluator_and_the_fit_cost_a_row_on_the_cores_it_ran_on(
    cell: str, stated: bool
) -> None:
    row = _row("SwiGlu", "x=[2,512,1024]", block_dim=cell)
    _, lowering, groups = lowered(row)
    default = lowering.default(groups[0])
    cores = measured_config(lowering, groups[0], row).block_dim
    assert cores == (6 if stated else default.block_dim)
    [fit], problems = real_measurements([row], "ascend910b")
    assert problems == [] and fit.config.block_dim == cores
    # fewer cores move the same bytes more slowly, and the evaluator's default sees it
    models = {"simulator": lambda t: make_cost_model("simulator", t)}
    sim = predict_row(row, models)
    full = predict_row(_row("SwiGlu", "x=[2,512,1024]"), models)
    if stated:
        assert sim.predicted["simulator/default"] > 2 * full.predicted["simulator/default"]
    else:
        assert sim.predicted == full.predicted


@pytest.mark.parametrize(("cores", "sq"), [(1, 128), (2, 256), (4, 512)])
def test_an_attention_seen_on_fewer_cores_splits_the_keys_only_for_them(cores, sq) -> None:
    """A flash kernel on S/128 cores (a kernel written for the shape) gives each core its
    query rows over every key: no split of the keys meant to fill the chip's 24 cores, which
    on one core would read K and V once per split and per query block."""
    shapes = f"q=[1,{sq},128] k=v=[1,8192,128] (BSH, head_dim=128)"
    cells = {"block_dim": f"{cores} (jit_cores=sq/128)", "chip": "910B2"}
    row = _row("jit_flash attention", shapes, "fp16", **cells)
    _, lowering, groups = lowered(row)
    seen = measured_config(lowering, groups[0], row)
    capped = dataclasses.replace(lowering.default(groups[0]), block_dim=cores)
    assert seen.block_dim == cores and seen.knob("kv_split", 1) == 1 < capped.knob("kv_split", 1)
    model = make_cost_model("analytic", load_target("ascend910b2"))
    own, chips = (model.evaluate([lowering.kernel(groups[0], c)])[0] for c in (seen, capped))
    assert own.device_us < chips.device_us


@given(st.integers(1, 48), st.sampled_from([(2, 64, 256), (2, 128, 512), (4, 512, 1024)]))
def test_a_kernel_seen_on_fewer_cores_is_tiled_for_them(cores: int, shape: tuple) -> None:
    """The tiles a vector kernel takes deal its rows over the cores it ran on: on fewer cores,
    no smaller tiles than on all of them, and never more tile rows than a core's share of the
    rows (or the smallest tile), and the largest such -- so a kernel on 6 cores is not run in
    11 waves of tiles cut for 40."""
    dims = ",".join(map(str, shape))
    row = _row("SwiGlu", f"gate=[{dims}], up=[{dims}]", block_dim=str(cores))
    _, lowering, groups = lowered(row)
    full = lowering.default(groups[0])
    seen = measured_config(lowering, groups[0], row)
    assert seen.block_dim == min(cores, full.block_dim)
    assert seen.ub_rows * seen.ub_cols >= full.ub_rows * full.ub_cols
    rows = shape[0] * shape[1]
    share = -(-rows // seen.block_dim)
    smallest = min(c.ub_rows for c in lowering.grid(groups[0]))
    assert seen.ub_rows <= max(share, smallest)
    area = seen.ub_rows * seen.ub_cols
    larger = [
        c
        for c in lowering.grid(groups[0])
        if c.double_buffer and c.ub_rows <= share and c.ub_rows * c.ub_cols > area
    ]
    assert larger == []  # the largest double-buffered tile within a core's share


def test_impl_comes_from_its_column_and_defaults_to_a_library_kernel(tmp_path: Path) -> None:
    assert _row("RmsNorm", "x=[2,8]").impl == "library"
    assert _row("RmsNorm", "x=[2,8]", impl="Custom").impl == "custom"
    csv = tmp_path / "real.csv"
    csv.write_text(
        "chip,op,shapes,dtype,time_us,timing,impl\n"
        + '910B4,RmsNorm,"x=[2,64], gamma=[64]",fp32,5,device,triton\n'
        + '910B4,RmsNorm,"x=[2,64], gamma=[64]",fp32,5,device,\n'
    )
    rows, problems = read_real([csv])
    assert [r.row for r in rows] == [2] and [p.row for p in problems] == [1]
    assert "impl 'triton' must be 'library' or 'custom'" in str(problems[0])


@pytest.mark.parametrize("shape", ["x=[2,64,256], gamma=[256]", "x=[2,2048,1024], gamma=[1024]"])
def test_a_library_row_costs_the_same_kernel_plus_the_library_prologue(shape: str) -> None:
    """The same RMSNorm timed as CANN's op and as a kernel written for the shape: every model
    charges the library one its longer prologue once, at any size, and nothing else."""
    models = model_makers(("simulator", "analytic"), make_cost_model)
    library = predict_row(_row("RmsNorm", shape, block_dim="40"), models)
    custom = predict_row(_row("RmsNorm", shape, block_dim="40", impl="custom"), models)
    spec = load_target("ascend910b4").spec
    extra_us = spec.library_setup_cycles / spec.clock_hz * 1e6
    assert extra_us > 1.0  # the public pairs: ~3.3 us longer task
    for name in ("simulator/default", "analytic/default"):
        gained = library.predicted[name] - custom.predicted[name]
        assert gained == pytest.approx(extra_us, rel=0.05), name


def test_the_library_prologue_is_what_the_public_pairs_add_to_the_task() -> None:
    """The torch_npu RMSNorm and SwiGLU timed beside PyAsc's and Ascend C's kernels of the
    same shapes in one run on one 910B4 (msprof task duration): up to 1M elements, the library
    kernel's task is longer by the prologue the spec charges (the median pair, within 10%),
    not by the scalar unit's extra busy time alone (~2.2 us, which under-prices it). A column
    re-timed in another run (another commit of the README: another CANN) is not paired."""
    rows, _ = read_real([REAL])
    diffs = [
        p.diff_us
        for p in library_pairs(rows)
        if "pyasc" in p.source
        and p.family in ("rmsnorm", "swiglu")
        and math.prod(p.data) <= 1 << 20
    ]
    assert len(diffs) >= 10
    spec = load_target("ascend910b4").spec
    prologue_us = spec.library_setup_cycles / spec.clock_hz * 1e6
    assert prologue_us == pytest.approx(float(np.median(diffs)), rel=0.10)


def test_library_pairs_pair_the_two_columns_of_one_run_only() -> None:
    """A library and a hand-written time of the same op, dtype and data pair up when one run
    (one source file at one commit) holds both; a library time re-taken in another run has no
    partner, and a cube-only kernel or a host time is never a pair."""
    shape = "x=[2,64,256], gamma=[256]"
    run, rerun = "github:o/r@aaaa:README.md", "github:o/r@bbbb:README.md"
    rows = [
        _row("RmsNorm", shape, time_us="7.0", timing="device", source=run),
        _row("RmsNorm", shape, time_us="4.0", timing="device", source=run, impl="custom"),
        _row("RmsNorm", shape, time_us="9.0", timing="device", source=rerun),
        _row("RmsNorm", "x=[2,64,512], gamma=[512]", time_us="9", timing="device", source=rerun),
        _row("RmsNorm", shape, time_us="30", timing="host", source=run),
        _row("RmsNorm", shape, time_us="20", timing="host", source=run, impl="custom"),
        _row("MatMul", "x=[128,512], W=[512,512]", timing="device", source=run),
        _row("MatMul", "x=[128,512], W=[512,512]", timing="device", source=run, impl="custom"),
    ]
    [pair] = library_pairs(rows)
    assert (pair.source, pair.source_name, pair.family, pair.data) == (
        run,
        "o/r",
        "rmsnorm",
        (2, 64, 256),
    )
    assert (pair.library_us, pair.custom_us, pair.diff_us) == (7.0, 4.0, 3.0)


def test_a_library_rows_fit_row_measures_the_kernel_the_tool_would_generate() -> None:
    shape = "x=[2,64,256], gamma=[256]"
    library, custom = _row("RmsNorm", shape), _row("RmsNorm", shape, impl="custom")
    [lib, own], problems = real_measurements([library, custom], "ascend910b")
    spec = load_target("ascend910b4").spec
    assert problems == []
    assert lib.provenance.spec_digest == own.provenance.spec_digest == spec.digest()
    prologue = spec.library_setup_cycles / spec.clock_hz * 1e6
    assert own.latency_us - lib.latency_us == pytest.approx(prologue)


@pytest.mark.parametrize("op", ["RmsNorm", "MatMul"])
def test_a_host_timed_row_is_evaluated_but_never_a_fit_row(op: str) -> None:
    """A wall clock holds the launch and every kernel the framework ran for the op: it is not
    the time of the one kernel the row lowers to, so no fit learns from it; the evaluation
    still costs it (against the models' latency)."""
    shape = "x=[2,64,256], gamma=[256]" if op == "RmsNorm" else "x=[128,512], W=[512,512]"
    device = _row(op, shape, timing="device")
    host = dataclasses.replace(_row(op, shape, time_us="50.0", timing="host"), row=2)
    fitted, problems = real_measurements([host, device], "ascend910b")
    [only] = real_measurements([device], "ascend910b")[0]
    assert fitted == [only]  # the device row's fit row, and nothing of the 50 us host time
    assert len(problems) == 1 and "row 2: timed on the host" in problems[0]
    # the evaluation costs it as the device row's kernel, against the models' latency
    models = {"simulator": lambda t: make_cost_model("simulator", t)}
    got = predict_row(host, models).predicted["simulator/default"]
    device_us = predict_row(device, models).predicted["simulator/default"]
    spec = load_target("ascend910b4").spec
    assert got == pytest.approx(device_us + spec.kernel_gap_s * 1e6)


def test_cann_cube_only_kernels_pay_no_library_prologue() -> None:
    """torch_npu's Linear times as PyAsc's hand-written one does at the same shapes (median
    0.1 us apart), where its RMSNorm is 2.8 us slower: a library row whose kernel is cube-only
    is costed as the kernel the tool would generate, and its fit row keeps its whole time;
    a vector kernel (RMSNorm) and a mixed one (a GEMV with its vector epilogue) still pay it."""
    op, shape = "MatMul (linear)", "x=[128,512], W=[512,512]"
    models = model_makers(("simulator", "analytic"), make_cost_model)
    library = predict_row(_row(op, shape, "fp16"), models)
    custom = predict_row(_row(op, shape, "fp16", impl="custom"), models)
    assert library.error == "" and library.predicted == custom.predicted
    [lib, own], problems = real_measurements(
        [_row(op, shape, "fp16"), _row(op, shape, "fp16", impl="custom")], "ascend910b"
    )
    assert problems == [] and lib.latency_us == own.latency_us
    for paying in (
        _row("RmsNorm", "x=[2,64,256], gamma=[256]"),
        _row("torch.addmv", "A=[4096,4096], x=[4096], b=[4096]", "fp16"),
    ):
        chip, lowering, groups = lowered(paying)
        kernels = [lowering.kernel(g, lowering.default(g)) for g in groups]
        assert library_prologue_us(paying, chip, kernels) > 1.0, paying.op
