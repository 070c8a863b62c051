"""Measurement records and calibration tables (``costmodel.measure.record``, ``.table``):
kernel JSON, records, parquet files, the manifest."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import bert_ffn_block, conv_bn_relu, exporter_attention
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernels_by_hand import add, gelu, matmul, matmul_gelu

from costmodel.base import KernelCost
from costmodel.exceptions import CostModelError
from costmodel.kernel import PIPES, Kernel
from costmodel.lower import Lowering
from costmodel.measure import (
    PIPE_COLUMNS,
    REQUIRED_COLUMNS,
    SIMULATOR_VERSION,
    Measurement,
    Provenance,
    kernel_from_json,
    kernel_to_json,
    measurements,
    measurements_of,
    merge_table,
    read_table,
    row_key,
    table_frame,
    update_manifest,
    write_table,
)
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import make_group, singleton_groups

T910B = load_target("ascend910b")
PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def round_trip(kernel: Kernel) -> Kernel:
    return kernel_from_json(json.loads(json.dumps(kernel_to_json(kernel))))


# -- kernel records -----------------------------------------------------------------------------
pow2 = st.sampled_from


@st.composite
def hand_kernels(draw: st.DrawFn) -> Kernel:
    """Every hand-made kernel shape, with the knobs the lowering varies."""
    which = draw(st.sampled_from(["matmul", "add", "matmul_gelu", "gelu"]))
    db = draw(st.booleans())
    if which == "matmul":
        size = draw(st.sampled_from([512, 1024, (1024, 2048, 512), (4096, 256, 1024)]))
        l1 = (draw(pow2([64, 128, 256])), draw(pow2([64, 128, 256])), draw(pow2([64, 128])))
        l0 = (min(l1[0], 128), min(l1[1], 128), 64)
        return matmul(
            size, l1, l0, draw(st.integers(1, 24)), db, draw(pow2([2, 4])),
            nd2nz=draw(st.booleans()),
        )  # fmt: skip
    if which == "add":
        return add(draw(pow2([1 << 12, 1 << 20])), draw(pow2([1024, 4096])), 48, db)
    if which == "matmul_gelu":
        return matmul_gelu(draw(pow2([512, 1024])), block_dim=draw(st.integers(1, 24)))
    return gelu(draw(pow2([256, 1024])), block_dim=draw(st.integers(1, 48)))


@PROPS
@given(hand_kernels())
def test_a_hand_made_kernel_survives_json(kernel: Kernel) -> None:
    back = round_trip(kernel)
    assert back == kernel
    assert kernel_to_json(back) == kernel_to_json(kernel)


@functools.cache
def lowered_kernels() -> list[Kernel]:
    """Kernels of every template, lowered from tiny graphs under a spread of their configs."""
    ffn = load_graph(bert_ffn_block(64, 32, 64))
    att = load_graph(exporter_attention(), input_shapes={"x": (2, 16, 16)})
    cnn = load_graph(conv_bn_relu(), input_shapes={"img": (2, 3, 16, 16)})
    fused = [
        (ffn, ["up", "up_bias", "relu"]),
        (ffn, ["down", "residual", "ln"]),  # mixed: an L2 hand-off
        (att, ["qk", "scale", "add_mask", "softmax", "isnan", "nan_guard", "pv"]),  # knobs
        (cnn, ["conv", "bn", "relu"]),
    ]
    groups = [(g, grp) for g in (ffn, att, cnn) for grp in singleton_groups(g)]
    groups += [(g, make_group(g, ops)) for g, ops in fused]
    out = []
    for graph, group in groups:
        low = Lowering(graph, T910B)
        grid = low.grid(group)
        out += [low.kernel(group, cfg) for cfg in grid[:: max(1, len(grid) // 3)]]
    return out


def test_lowered_kernels_survive_json() -> None:
    kernels = lowered_kernels()
    assert {k.unit for k in kernels} == {"cube", "vector", "mixed"}
    assert any(k.config.knobs for k in kernels) and any(k.signature for k in kernels)
    for k in kernels:
        assert round_trip(k) == k, k.name


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.pop("streams"),
        lambda d: d.update(grid=[1, 2]),
        lambda d: d.update(steps="many"),
        lambda d: d["streams"][0].__delitem__(slice(8, None)),  # row_bytes and reread gone
        lambda d: d.update(config={"base_m": 128}),
    ],
    ids=["no_streams", "short_grid", "text_steps", "short_stream", "config_without_block_dim"],
)
def test_a_malformed_kernel_record_is_a_cost_model_error(edit: Any) -> None:
    doc = json.loads(json.dumps(kernel_to_json(matmul(512))))
    edit(doc)
    with pytest.raises(CostModelError, match="malformed kernel record"):
        kernel_from_json(doc)


# -- records -----------------------------------------------------------------------------------
def some_records(n: int = 3, **overrides: Any) -> list[Measurement]:
    kernels = [matmul(512, block_dim=4), add(1 << 14, tile=4096), matmul_gelu(512)][:n]
    costs = [KernelCost(10.0 + i, {"MTE2": 1.5 + i, "V": 0.25}) for i in range(len(kernels))]
    resident = [[0.0] * sum(s.is_load for s in k.streams) for k in kernels]
    kw: dict[str, Any] = dict(
        target="ascend910b",
        spec_digest=T910B.spec.digest(),
        precision="auto",
        measured_by=SIMULATOR_VERSION,
        seed=7,
        source="test",
        family="hand",
    )
    return measurements(kernels, costs, resident, Provenance(**(kw | overrides)))


def test_records_carry_the_kernel_and_what_was_measured_into_the_columns() -> None:
    kernels = [matmul(512, block_dim=4), matmul_gelu(512)]
    costs = [KernelCost(12.5, {"MTE2": 3.0, "M": 2.0}), KernelCost(40.0, {"V": 9.0})]
    resident = [[0.25, 1 / 3], [0.0, 0.0, 0.5]]
    provenance = Provenance("ascend910b", "abc", "fp16", SIMULATOR_VERSION, 3, "sim", "bert")
    records = measurements(kernels, costs, resident, provenance, group_ids=["g0", "g1"])
    assert len(records) == 2
    rows = table_frame(records).to_dict("records")
    for m, row, k, c, res, gid in zip(
        records, rows, kernels, costs, resident, ["g0", "g1"], strict=True
    ):
        assert (m.kernel, m.provenance, m.group_id) == (k, provenance, gid)
        assert (m.signature, m.config, m.latency_us) == (k.signature, k.config, c.latency_us)
        assert set(REQUIRED_COLUMNS) == set(row)
        assert kernel_from_json(json.loads(row["kernel"])) == k
        assert json.loads(row["config"]) == k.config.to_json()
        assert json.loads(row["resident"]) == pytest.approx(res, abs=1e-6)
        assert list(m.resident) == json.loads(row["resident"])
        assert row["latency_us"] == c.latency_us and row["group_id"] == gid
        assert (row["kind"], row["unit"], row["signature"]) == (k.kind, k.unit, k.signature)
        assert (row["target"], row["precision"], row["seed"]) == ("ascend910b", "fp16", 3)
        assert row["simulator_version"] == SIMULATOR_VERSION
        for pipe, col in zip(PIPES, PIPE_COLUMNS, strict=True):
            assert row[col] == c.pipes_us.get(pipe, 0.0) == m.cost.pipes_us[pipe]
    assert json.loads(rows[0]["resident"])[1] == 0.333333  # six decimals
    # without group ids a record is ranked within its kernel signature
    assert [m.group_id for m in some_records()] == [m.signature for m in some_records()]
    with pytest.raises(dataclasses.FrozenInstanceError):
        records[0].group_id = "other"


# -- parquet tables -----------------------------------------------------------------------------
def test_a_table_round_trips_every_record_and_column(tmp_path: Path) -> None:
    records = some_records()
    path = tmp_path / "t.parquet"
    assert write_table(records, path) == 3
    back = read_table(path)
    assert list(back.columns) == list(REQUIRED_COLUMNS)
    pd.testing.assert_frame_equal(back, table_frame(records))
    assert measurements_of(back) == records
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_several_tables_read_as_one(tmp_path: Path) -> None:
    write_table(some_records(2, family="a"), tmp_path / "a.parquet")
    write_table(some_records(3, family="b"), tmp_path / "b.parquet")
    both = read_table([tmp_path / "a.parquet", str(tmp_path / "b.parquet")])
    assert list(both["family"]) == ["a", "a", "b", "b", "b"]
    assert list(both.index) == list(range(5))


def test_merging_keeps_the_rows_there_and_adds_each_record_once(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    first = some_records(2)
    assert merge_table(first, path) == 2
    again = some_records(3)  # two of them already there
    other = some_records(1, source="elsewhere")  # the same kernel measured by another source
    assert merge_table(again + other, path) == 4
    back = read_table(path)
    assert measurements_of(back) == [*first, again[2], *other]
    assert len({row_key(m) + m.provenance.source for m in measurements_of(back)}) == 4
    path.write_text("not a table")  # one that cannot be read is replaced
    assert merge_table(first, path) == 2


def write_frame(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_parquet(path, index=False)
    return path


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.parquet"
    path.write_text("latency_us,target\n1.0,ascend910b\n")
    with pytest.raises(CostModelError, match=r"notes\.parquet") as err:
        read_table(path)
    assert "parquet" in str(err.value).lower().replace("notes.parquet", "")


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match=r"cannot read calibration table .*absent\.parquet"):
        read_table(tmp_path / "absent.parquet")
    with pytest.raises(CostModelError, match="no calibration tables given"):
        read_table([])


def test_a_parquet_without_the_columns_is_refused_naming_them(tmp_path: Path) -> None:
    path = write_frame(tmp_path / "other.parquet", pd.DataFrame({"latency_us": [1.0]}))
    with pytest.raises(CostModelError, match="is not a calibration table") as err:
        read_table(path)
    assert "kernel" in str(err.value) and "resident" in str(err.value)
    assert "latency_us" not in str(err.value).split("lacks")[1]
    frame = table_frame(some_records()).drop(columns=["pipe_MTE3_us"])
    with pytest.raises(CostModelError, match=r"lacks column.*pipe_MTE3_us"):
        read_table(write_frame(tmp_path / "short.parquet", frame))


def test_a_table_from_a_newer_tool_is_refused(tmp_path: Path) -> None:
    frame = table_frame(some_records())
    frame.loc[1, "schema_version"] = 2
    with pytest.raises(CostModelError, match="newer tool"):
        read_table(write_frame(tmp_path / "new.parquet", frame))


@pytest.mark.parametrize("latency", [0.0, -1.0, float("nan"), float("inf")])
def test_a_table_with_a_bad_latency_is_refused(tmp_path: Path, latency: float) -> None:
    frame = table_frame(some_records())
    frame.loc[2, "latency_us"] = latency
    write_frame(tmp_path / "bad.parquet", frame)
    with pytest.raises(CostModelError, match="non-positive or non-finite"):
        read_table(tmp_path / "bad.parquet")


def test_write_table_refuses_nothing(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match="no rows"):
        write_table([], tmp_path / "t.parquet")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("existing", [False, True])
def test_write_table_is_atomic(tmp_path: Path, existing: bool) -> None:
    path = tmp_path / "t.parquet"
    if existing:
        write_table(some_records(1), path)
    before = path.read_bytes() if existing else None
    records = some_records()
    # no parquet type holds both a text and a number (a record typed wrong at run time)
    records[1] = dataclasses.replace(
        records[1], provenance=dataclasses.replace(records[1].provenance, family=3)
    )
    with pytest.raises(Exception) as err:
        write_table(records, path)
    assert not isinstance(err.value, CostModelError)  # pyarrow's own, re-raised
    assert list(tmp_path.iterdir()) == ([path] if existing else [])
    if existing:
        assert path.read_bytes() == before
        assert len(read_table(path)) == 1


# -- manifest -----------------------------------------------------------------------------------
def test_manifest_records_size_hash_and_rows_and_replaces_by_file_name(tmp_path: Path) -> None:
    manifest = tmp_path / "MANIFEST.json"
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_table(some_records(3), b)
    write_table(some_records(2), a)
    update_manifest(manifest, b, {"rows": 3, "command": "autotune calibrate b"})
    update_manifest(manifest, a, {"rows": 2, "command": "autotune calibrate a"})

    def entries() -> dict[str, dict[str, Any]]:
        doc = json.loads(manifest.read_text())
        files = [t["file"] for t in doc["tables"]]
        assert files == sorted(files) and len(set(files)) == len(files)
        return {t["file"]: t for t in doc["tables"]}

    def check(entry: dict[str, Any], table: Path, rows: int) -> None:
        data = table.read_bytes()
        assert entry["bytes"] == len(data) == table.stat().st_size
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["rows"] == rows == len(read_table(table))

    first = entries()
    assert set(first) == {"a.parquet", "b.parquet"}
    check(first["a.parquet"], a, 2)
    check(first["b.parquet"], b, 3)
    assert first["a.parquet"]["command"] == "autotune calibrate a"

    write_table(some_records(1), a)  # regenerate a: its entry is replaced, b's is kept
    update_manifest(manifest, a, {"rows": 1, "command": "again"})
    second = entries()
    assert set(second) == {"a.parquet", "b.parquet"}
    check(second["a.parquet"], a, 1)
    assert second["a.parquet"]["sha256"] != first["a.parquet"]["sha256"]
    assert second["a.parquet"]["command"] == "again"
    assert second["b.parquet"] == first["b.parquet"]


def test_a_corrupt_manifest_is_rebuilt(tmp_path: Path) -> None:
    manifest = tmp_path / "MANIFEST.json"
    manifest.write_text("{not json")
    table = tmp_path / "t.parquet"
    write_table(some_records(1), table)
    update_manifest(manifest, table, {"rows": 1})
    doc = json.loads(manifest.read_text())
    assert [t["file"] for t in doc["tables"]] == ["t.parquet"]
    assert doc["tables"][0]["bytes"] == table.stat().st_size


@PROPS
@given(st.sampled_from([0.0, 0.25, 0.5]), hand_kernels())
def test_a_streams_reread_share_survives_json_and_old_rows_read_as_none(
    share: float, kernel: Kernel
) -> None:
    """A split row's re-read share is part of the record (the simulator serves it from L2); a
    row written before the field existed (9 stream fields) reads back with no re-read."""
    streams = tuple(
        dataclasses.replace(s, reread=share) if s.is_load else s for s in kernel.streams
    )
    k = dataclasses.replace(kernel, streams=streams)
    assert round_trip(k) == k
    old = kernel_to_json(k)
    old["streams"] = [row[:9] for row in old["streams"]]
    assert all(s.reread == 0.0 for s in kernel_from_json(old).streams)
