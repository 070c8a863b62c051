"""Hardware specs: shipped data is complete and sourced; user files are checked field by field."""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, fields
from importlib import resources
from pathlib import Path

import pytest

from costmodel.analytic import shipped_calibration_path
from costmodel.exceptions import SpecError
from costmodel.spec import DERIVED_FIELDS, HardwareSpec, available_targets, load_spec, load_target

DESIGN_KEYS = {
    "cube_cores",
    "vector_cores",
    "clock_hz",
    "l1_bytes",
    "l0a_bytes",
    "l0b_bytes",
    "l0c_bytes",
    "ub_bytes",
    "l2_bytes",
    "hbm_bytes_per_s",
    "hbm_peak_bytes_per_s",
    "kernel_gap_s",
}


def test_shipped_targets_are_complete_and_every_value_has_a_source() -> None:
    assert {"ascend910b", "ascend910", "ascend310p"} <= set(available_targets())
    names = {f.name for f in fields(HardwareSpec)} - DERIVED_FIELDS  # set by library() only
    assert names >= DESIGN_KEYS
    for target in ("ascend910b", "ascend910", "ascend310p"):
        text = resources.files("costmodel").joinpath("specs", f"{target}.toml").read_text()
        data = tomllib.loads(text)
        sources = data.pop("sources")
        assert set(data) == names, target
        assert set(sources) == names and all(len(v) > 10 for v in sources.values()), target
        load_spec(target)


def test_910b_figures_match_the_published_ones() -> None:
    spec = load_spec("ascend910b")
    assert spec.cube_peak_flops == pytest.approx(353.9e12, rel=1e-3)  # 24 x 8192 x 1.8 GHz
    assert spec.is_split and not load_spec("ascend910").is_split
    assert spec.hbm_bytes_per_s < spec.hbm_peak_bytes_per_s


def test_overrides_for_what_if_studies() -> None:
    assert load_spec("ascend910b", ["l2_bytes=0"]).l2_bytes == 0
    assert load_spec("ascend910b", {"hbm_bytes_per_s": 6.5e11}).hbm_bytes_per_s == 6.5e11
    with pytest.raises(SpecError, match="unknown spec field"):
        load_spec("ascend910b", ["l3_bytes=1"])
    with pytest.raises(SpecError, match="FIELD=VALUE"):
        load_spec("ascend910b", ["l2_bytes"])


def test_user_file_reports_every_bad_field_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'base = "ascend910b"\ncube_cores = -2\nub_bytes = "big"\nl0c_to_ub = 3\nwarp_size = 32\n'
    )
    with pytest.raises(SpecError) as err:
        load_spec(str(path))
    msg = str(err.value)
    assert "\n" not in msg
    for needle in (
        "cube_cores must be > 0",
        "ub_bytes must be a number",
        "l0c_to_ub",
        "unknown field(s) warp_size",
    ):
        assert needle in msg


def test_user_file_with_a_base_overrides_only_what_it_sets(tmp_path: Path) -> None:
    path = tmp_path / "half.toml"
    path.write_text('base = "ascend910b"\nname = "half"\ncube_cores = 12\n')
    spec = load_spec(str(path))
    assert spec.cube_cores == 12 and spec.name == "half"
    assert spec.l1_bytes == load_spec("ascend910b").l1_bytes
    path.write_text("cube_cores = 12\n")
    with pytest.raises(SpecError, match="missing field"):
        load_spec(str(path))


def test_the_library_prologue_charged_is_set_by_library_only(tmp_path: Path) -> None:
    """What a library kernel's prologue adds (``library_prologue_cycles``) is derived by
    ``HardwareSpec.library()``: neither a spec file nor ``--set`` may state it."""
    with pytest.raises(SpecError, match="unknown spec field"):
        load_spec("ascend910b", ["library_prologue_cycles=5"])
    path = tmp_path / "lib.toml"
    path.write_text('base = "ascend910b"\nlibrary_prologue_cycles = 5\n')
    with pytest.raises(SpecError, match=r"unknown field\(s\) library_prologue_cycles"):
        load_spec(str(path))
    spec = load_spec("ascend910b")
    assert spec.library().library_prologue_cycles == spec.library_setup_cycles > 0


def test_unknown_target_and_precision() -> None:
    with pytest.raises(SpecError, match="unknown target 'tpu'; available: ascend310p"):
        load_spec("tpu")
    with pytest.raises(SpecError, match="unknown precision"):
        load_target(precision="int3")
    assert load_target(precision="fp32").cube_rate(4) == load_spec().cube_fp32_rate
    assert load_target().cube_itemsize(4) == 2  # fp32 models: fp16 cube by default


VARIANTS = ("ascend910b1", "ascend910b2", "ascend910b3", "ascend910b4")


def test_910b_variants_cite_a_source_for_every_value_they_set() -> None:
    for target in VARIANTS:
        text = resources.files("costmodel").joinpath("specs", f"{target}.toml").read_text()
        data = tomllib.loads(text)
        sources = data.pop("sources")
        assert data.pop("base") == "ascend910b", target
        assert set(sources) == {*data, "base"}, target  # every value set, and what it inherits
        assert all(len(v) > 10 for v in sources.values()), target
        assert load_spec(target).name == target


def test_ascend910b_is_the_910b2_under_its_own_name() -> None:
    b, b2 = asdict(load_spec("ascend910b")), asdict(load_spec("ascend910b2"))
    assert b.pop("name") == "ascend910b" and b2.pop("name") == "ascend910b2"
    assert b == b2


def test_the_variants_differ_where_the_platform_configs_do() -> None:
    b1, b2, b3, b4 = (load_spec(t) for t in VARIANTS)
    assert b1.clock_hz > b2.clock_hz == b3.clock_hz > b4.clock_hz
    assert b1.cube_cores == b2.cube_cores == 24 and b3.cube_cores == b4.cube_cores == 20
    assert b3.vector_cores == b4.vector_cores == 2 * b4.cube_cores
    assert b4.l2_bytes * 2 == b2.l2_bytes and b4.hbm_bytes_per_s == b2.hbm_bytes_per_s


ROOT = Path(__file__).resolve().parents[2]


def test_every_shipped_table_and_fit_was_made_on_its_targets_current_spec() -> None:
    """The calibration tables (datasets/calibration/MANIFEST.json) and the shipped fitted
    constants name the digest of the spec they were made on; each is its target's digest now.
    A field added after a table was made, left at its default, keeps the digest (the 910 and
    310P tables predate ``cube_gm_bytes_per_cycle``); a changed value asks for the table and
    the fit to be made again."""
    manifest = json.loads((ROOT / "datasets/calibration/MANIFEST.json").read_text())
    made = [(t["target"], t["spec_digest"]) for t in manifest["tables"] if "spec_digest" in t]
    for target in {t for t, _ in made}:
        path = shipped_calibration_path(target)
        made.append((target, json.loads(path.read_text())["spec_digest"]))
    assert len(made) >= 6
    for target, digest in made:
        assert digest == load_spec(target).digest(), target


def test_the_library_prologue_reads_hit_l2_inside_a_step() -> None:
    """Timed alone a library kernel pays its measured prologue (4500 cycles on the 910B);
    inside a step its 3 reads pay an L2 latency (50 cycles) instead of a GM one (1400): 450
    cycles, and the tiling read of every kernel the same step less, in whichever order the
    library and in-situ views are taken. No setting makes the in-situ prologue longer than
    the one timed alone or negative; the digest of a chip's own spec moves with neither
    library field."""
    spec = load_spec("ascend910b")
    assert spec.library().library_prologue_cycles == 4500
    assert spec.library().in_situ().library_prologue_cycles == pytest.approx(450)
    assert spec.in_situ().library() == spec.library().in_situ()
    assert spec.kernel_setup_cycles - spec.in_situ().kernel_setup_cycles == pytest.approx(1350)
    assert spec.in_situ().digest() != spec.digest()
    for sets in ({"library_setup_reads": 9}, {"l2_latency_cycles": 2000},
                 {"library_setup_cycles": 0}, {"gm_latency_cycles": 1501}):  # fmt: skip
        odd = load_spec("ascend910b", sets)
        alone = odd.library().library_prologue_cycles
        assert 0 <= odd.library().in_situ().library_prologue_cycles <= alone, sets
    fewer = load_spec("ascend910b", {"library_setup_reads": 1})
    assert fewer.digest() == spec.digest()
    assert (
        fewer.in_situ().library().kernel_fixed_cycles
        > spec.in_situ().library().kernel_fixed_cycles
    )
