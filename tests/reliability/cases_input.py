"""Damaged storage and out-of-range values (issue 47): the cases, over :mod:`corpus_input`'s
files, with the outcome each must have. Categories: ``storage`` (journals that are no Optuna
journal, a read-only folder, a bad sampler that must leave no study), ``range`` (every numeric
option of tune, calibrate, verify and estimate out of its range), ``nesting`` (files nested
thousands of levels deep; a measurements table for a plan), ``start-up`` (Ctrl-C as a real
process starts) and ``network`` (a Dask scheduler that is none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cases import Case

__all__ = ["CATEGORIES", "input_cases"]

CATEGORIES = ("storage", "range", "nesting", "start-up", "network")
TUNE = ("tune", "{valid}", "--cost", "analytic", "--polish", "0", "--trials", "1")
PLAN = ("-o", "{tmp}/p.json")
ZOO = ("zoo:bert-base", "--layers", "1", "--scale", "0.25", "--shape-range", "seq=8..16")
TUNE_RANGED = ("tune", *ZOO, "--cost", "analytic", "--polish", "0", "--trials", "1")
FRESH = (*PLAN, "--storage", "{tmp}/s.journal")
CALIBRATE = ("calibrate", "--models", "{valid}", "--samples", "2", "-o", "{tmp}/t.parquet")
NOT_OPS = "is not an optuna journal operation"
RO = "read-only file system"


def _storage(case: type[Case]) -> list[Case]:
    def journal(name: str, storage: str, says: str, *extra: str) -> Case:
        argv = (*TUNE, *extra, *PLAN, "--storage", storage)
        return case(name, "storage", argv, 1, says, ("{tmp}/p.json",))

    return [
        journal("journal_not_ops", "{journal_not_ops}", NOT_OPS),
        journal("journal_unknown_op", "{journal_unknown_op}", NOT_OPS),
        journal("journal_missing_fields", "{journal_missing_fields}", NOT_OPS),
        journal("journal_blank_line", "{journal_blank_line}", "is damaged, not only the last"),
        journal("journal_read_only", "{ro_dir}/s.journal", RO),
        journal("journal_read_only_new", "{ro_dir}/new.journal", RO),
        # the journal is a corpus file: unchanged after the run, so no study was added to it
        journal("sampler_no_study", "{journal_valid}", "unknown sampler", "--sampler", "foo"),
        case(
            "sampler_no_journal",
            "storage",
            (*TUNE, "--sampler", "foo", *FRESH),
            1,
            "unknown sampler",
            ("{tmp}/p.json", "{tmp}/s.journal"),
        ),
    ]


# (id, argv, exit status, phrase): 2 is typer's range check, which names the range
RANGES: list[tuple[str, tuple[str, ...], int, str]] = [
    ("tune_seed_-1", (*TUNE, "--seed", "-1", *FRESH), 2, ""),
    ("tune_seed_2^32", (*TUNE, "--seed", str(2**32), *FRESH), 2, ""),
    ("tune_seed_2^64", (*TUNE, "--seed", str(2**64), *FRESH), 2, ""),
    ("tune_seed_2^32-1", (*TUNE, "--seed", str(2**32 - 1), *FRESH), 0, ""),
    ("tune_polish_-5", (*TUNE, "--polish", "-5", *FRESH), 1, "--polish"),
    ("tune_pick_-1", (*TUNE, "--pick", "-1", *FRESH), 2, ""),
    ("tune_measure_every_0", (*TUNE, "--measure-every", "0", *FRESH), 1, "--measure-every"),
    ("tune_retrain_every_0", (*TUNE, "--retrain-every", "0", *FRESH), 1, "--retrain-every"),
    ("tune_timeout_inf", (*TUNE, "--timeout", "inf", *FRESH), 1, "--timeout"),
    ("tune_timeout_nan", (*TUNE, "--timeout", "nan", *FRESH), 1, "--timeout"),
    ("tune_fusion_level_9", (*TUNE, "--fusion-level", "9", *FRESH), 1, "fusion_level"),
    ("tune_max_fused_ops_0", (*TUNE, "--max-fused-ops", "0", *FRESH), 1, "max_fused_ops"),
    ("tune_benefit_nan", (*TUNE, "--benefit-threshold", "nan", *FRESH), 1, "benefit_threshold"),
    ("verify_seed_-1", ("verify", "{valid}", "{plan_valid}", "--seed", "-1"), 2, ""),
    ("verify_seed_2^64", ("verify", "{valid}", "{plan_valid}", "--seed", str(2**64)), 2, ""),
    ("estimate_top_-1", ("estimate", "{valid}", "--cost", "analytic", "--top", "-1"), 2, ""),
    (
        "estimate_batch_0",
        ("estimate", "zoo:bert-base", "--layers", "1", "--batch", "0"),
        1,
        "batch",
    ),
    ("estimate_scale_nan", ("estimate", "zoo:bert-base", "--scale", "nan"), 1, "scale"),
    ("estimate_seq_len_-5", ("estimate", "zoo:bert-base", "--seq-len", "-5"), 1, "seq_len"),
    ("calibrate_seed_-1", (*CALIBRATE, "--seed", "-1"), 2, ""),
    ("calibrate_seed_2^64", (*CALIBRATE, "--seed", str(2**64)), 2, ""),
    ("calibrate_jobs_-1", (*CALIBRATE, "--jobs", "-1"), 2, ""),
    ("calibrate_warm_nan", (*CALIBRATE, "--warm", "nan"), 1, "--warm"),
    ("calibrate_warm_-0.5", (*CALIBRATE, "--warm", "-0.5"), 1, "--warm"),
    ("calibrate_dask_timeout_inf", (*CALIBRATE, "--dask-timeout", "inf"), 1, "--dask-timeout"),
    ("calibrate_hw_weight_inf", (*CALIBRATE, "--hardware-weight", "inf"), 1, "--hardware-weight"),
    ("calibrate_hw_weight_-1", (*CALIBRATE, "--hardware-weight", "-1"), 1, "--hardware-weight"),
    # shape ranges (issue 49): a dim the model does not have, a range upside down, buckets
    # without a range, a traffic file that is not there, no bucket to search on
    (
        "tune_range_static_dim",
        (*TUNE, "--shape-range", "seq=1..8", *FRESH),
        1,
        "not a dynamic dim",
    ),
    (
        "tune_range_upside_down",
        (*TUNE, "--shape-range", "n=9..3", *FRESH),
        1,
        "lo 9 is above hi 3",
    ),
    (
        "estimate_buckets_alone",
        ("estimate", "{valid}", "--buckets", "n=1,2"),
        1,
        "divide a --shape",
    ),
    (
        "tune_range_traffic_missing",
        (*TUNE_RANGED, "--traffic", "{tmp}/none.csv", *FRESH),
        1,
        "cannot read it as csv",
    ),
    (
        "tune_search_buckets_0",
        (*TUNE_RANGED, "--search-buckets", "0", *FRESH),
        1,
        "--search-buckets",
    ),
    (
        "zoo_export_seed_-1",
        ("zoo", "export", "bert-base", "-o", "{tmp}/m.onnx", "--seed", "-1"),
        2,
        "",
    ),
]


def _ranges(case: type[Case]) -> list[Case]:
    out = []
    for name, argv, code, says in RANGES:
        written = tuple(a for a in argv if a.startswith("{tmp}/") and "journal" not in a)
        out.append(case(name, "range", argv, code, says, written if code else ()))
    return out


def _nesting(case: type[Case]) -> list[Case]:
    out = []
    for plan, says in (("{plan_deep}", "nested too deeply"), ("{measurements}", "measurements")):
        name = plan.strip("{}")
        argvs = {
            "report": ("report", plan),
            "estimate": ("estimate", "{valid}", "--plan", plan, "--cost", "analytic"),
            "apply": ("apply", "{valid}", plan, "-o", "{tmp}/fused.onnx"),
            "verify": ("verify", "{valid}", plan),
        }
        for cmd, argv in argvs.items():
            written = ("{tmp}/fused.onnx",) if cmd == "apply" else ()
            out.append(case(f"{name}-{cmd}", "nesting", argv, 1, says, written))
    deep = "nested too deeply"
    est = ("estimate", "{valid}", "--cost", "analytic")
    out += [
        case("config_deep-estimate", "nesting", (*est, "--config", "{config_deep}"), 1, deep),
        case(
            "config_deep-tune",
            "nesting",
            (*TUNE, "--config", "{config_deep}", *FRESH),
            1,
            deep,
            ("{tmp}/p.json",),
        ),
        case("spec_deep-estimate", "nesting", (*est, "--target", "{spec_deep}"), 1, deep),
        case(
            "cost_model_deep-tune",
            "nesting",
            ("tune", "{valid}", "--trials", "1", "--cost-model-file", "{cost_model_deep}", *FRESH),
            1,
            deep,
            ("{tmp}/p.json",),
        ),
    ]
    return out


def _start_up(case: type[Case]) -> list[Case]:
    """Ctrl-C to a real ``autotune tune`` as it starts: once it has loaded numpy (the
    command line's imports) and once onnx (a flag's check imports it, as the command line is
    read); either way before the study."""
    written = ("{tmp}/p.json", "{tmp}/s.journal")
    argv = ("tune", "{valid}", "--cost", "analytic", "--trials", "50", *FRESH)
    return [
        case("sigint_in_imports", "start-up", argv, 130, "", written, "sigint:_multiarray_umath"),
        case(
            "sigint_reading_flags", "start-up", argv, 130, "", written, "sigint:onnx_cpp2py_export"
        ),
    ]


def _network(case: type[Case]) -> list[Case]:
    def dask(port: str) -> tuple[str, ...]:
        return (*CALIBRATE, "--dask", f"tcp://127.0.0.1:{port}", "--dask-timeout", "1")

    out = ("{tmp}/t.parquet",)
    return [
        case(
            "dask_silent", "network", dask("{silent_port}"), 1, "no dask scheduler answered", out
        ),
        case("dask_junk", "network", dask("{junk_port}"), 1, "is not a dask scheduler", out),
    ]


def input_cases() -> list[Case]:
    """Every case of this file (called as :mod:`cases` builds its list)."""
    from cases import Case

    makers = (_storage, _ranges, _nesting, _start_up, _network)
    return [c for make in makers for c in make(Case)]
