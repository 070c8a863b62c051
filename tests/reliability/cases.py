"""The bad-input cases: what each command must do with each corpus file (:mod:`corpus`).

A case is a command line (``{name}`` is a corpus file, ``{tmp}`` the case's own folder) and
its expected outcome, written beside it: the exit status (1: one clear line on stderr, 2: a
usage error as the CLI framework reports it, 0: accepted) and a phrase that line must hold.
Whatever the outcome: no traceback, no corpus file changed, and after a failure no output
file left behind.
"""

from __future__ import annotations

from dataclasses import dataclass

import cases_input
from cases_output import OUTPUT

__all__ = ["ALL", "Case"]


@dataclass(frozen=True)
class Case:
    """One command line and its expected outcome."""

    id: str
    category: str
    argv: tuple[str, ...]
    code: int
    says: str = ""  # lower-case phrase the error line holds (exit 1)
    outputs: tuple[str, ...] = ()  # files the command would write (absent after a failure)
    how: str = ""  # "": in-process; "sigint:<lib>": a real process, Ctrl-C once <lib> loads


# -- models: every command that reads a model ----------------------------------------------------
# corpus model -> (exit status, phrase); 0 = legal, if odd, ONNX the tool accepts and handles
MODELS: dict[str, tuple[int, str]] = {
    "truncated": (1, "not a readable onnx model"),
    "random": (1, "not a readable onnx model"),
    "text": (1, "not a readable onnx model"),
    "empty": (1, "is empty (0 bytes)"),
    "folder": (1, "is a folder"),
    "missing": (1, "not found"),
    "symlink_loop": (1, "symbolic link that leads nowhere"),
    "opset_99": (1, "unsupported opset 99"),
    "missing_attribute": (1, "required attribute 'to' is missing"),
    "zero_dim": (0, ""),  # legal ONNX, an empty tensor: no work (0 us, each op alone)
    "dynamic_dims": (1, "--input-shape x="),
    "cycle": (1, "has a cycle"),
    "duplicate_output": (1, "produced by both"),
    "no_nodes": (1, "no graph nodes"),
    "external_missing": (1, "not found"),
    "external_outside": (1, "outside the model's folder"),
    "valid": (0, ""),
    "unknown_domain": (0, ""),  # an opaque op
    "if_subgraph": (0, ""),  # an opaque op
    "duplicate_node_names": (0, ""),  # renamed apart
    "empty_names": (0, ""),  # named by type and position
    "output_is_input": (0, ""),
    "huge_dims": (0, ""),  # an Add of [2^31, 2^31]: costed in closed form, never simulated
}
# calibrate names the models it can take when a path is not a file
CALIBRATE_PATHS = {"folder", "missing", "symlink_loop"}
# what a closed-form command accepts but a simulating one refuses, with the phrase
SIMULATED = {"huge_dims": (1, "beyond the simulator's budget")}
# what calibrate says of a model with no kernel to sample (an empty one), and the fix
NO_KERNELS = {"zero_dim": (1, "is empty (a zero dim)")}


def _model_cases() -> list[Case]:
    out = []
    for name, (code, says) in MODELS.items():
        m = "{" + name + "}"
        argvs = {
            "inspect": ("inspect", m),
            "estimate": ("estimate", m, "--cost", "analytic"),
            "candidates": ("candidates", m),
            "tune": (
                "tune",
                m,
                "--trials",
                "1",
                "--cost",
                "analytic",
                "--polish",
                "0",
                "-o",
                "{tmp}/plan.json",
                "--storage",
                "{tmp}/s.journal",
            ),
            "calibrate": ("calibrate", "--models", m, "--samples", "2", "-o", "{tmp}/t.parquet"),
        }
        for cmd, argv in argvs.items():
            c, s = code, says
            if cmd == "calibrate" and name in CALIBRATE_PATHS:
                s = "neither zoo:name"
            if cmd in ("tune", "calibrate") and name in SIMULATED:
                c, s = SIMULATED[name]
            if cmd == "calibrate" and name in NO_KERNELS:
                c, s = NO_KERNELS[name]
            outputs = tuple(a for a in argv if a.startswith("{tmp}/") and "journal" not in a)
            out.append(Case(f"{name}-{cmd}", "model", argv, c, s, outputs))
        # apply and verify with the valid model's plan: a bad model fails as it reads, a good
        # one other than the valid model is not the plan's model
        for cmd in ("apply", "verify"):
            argv = (cmd, m, "{plan_valid}") + (
                ("-o", "{tmp}/fused.onnx") if cmd == "apply" else ()
            )
            c, s = code, says
            if code == 0 and name != "valid":
                c, s = 1, ("plan names op" if "names" in name else "different model")
            outputs = ("{tmp}/fused.onnx",) if cmd == "apply" else ()
            out.append(Case(f"{name}-{cmd}", "model", argv, c, s, outputs))
    return out


# -- plans: every command that reads a plan -----------------------------------------------------
# plan -> (exit status, phrase) for report (the plan alone) and for estimate/apply/verify
PLANS: dict[str, tuple[tuple[int, str], tuple[int, str]]] = {
    "valid": ((0, ""), (0, "")),
    "not_json": ((1, "not valid json"), (1, "not valid json")),
    "empty": ((1, "not valid json"), (1, "not valid json")),
    "truncated": ((1, "not valid json"), (1, "not valid json")),
    "list": ((1, "does not hold a json object"), (1, "does not hold a json object")),
    "newer_schema": ((1, "schema 99"), (1, "schema 99")),
    "other_model": ((0, ""), (1, "different model")),
    "overlapping": ((1, "in two groups"), (1, "in two groups")),
    "unknown_op": ((0, ""), (1, "does not have")),
    "non_convex": ((0, ""), (1, "not a legal fusion")),
    "unknown_kind": ((1, "unknown kind 'mystery'"), (1, "unknown kind 'mystery'")),
    "negative_tiles": ((1, "config field"), (1, "config field")),
    "zero_tiles": ((1, "config field block_dim"), (1, "config field block_dim")),
    "float_tiles": ((1, "config field"), (1, "config field")),
    "string_tiles": ((1, "config field"), (1, "config field")),
    "absurd_tiles": ((1, "config field"), (1, "config field")),
    "overflow_buffer": ((0, ""), (1, "overflow")),
}


def _plan_cases() -> list[Case]:
    out = []
    for name, (alone, with_model) in PLANS.items():
        p = "{plan_" + name + "}"
        out.append(Case(f"plan_{name}-report", "plan", ("report", p), *alone))
        argvs = {
            "estimate": ("estimate", "{valid}", "--plan", p, "--cost", "analytic"),
            "apply": ("apply", "{valid}", p, "-o", "{tmp}/fused.onnx"),
            "verify": ("verify", "{valid}", p),
        }
        for cmd, argv in argvs.items():
            outputs = ("{tmp}/fused.onnx",) if cmd == "apply" else ()
            out.append(Case(f"plan_{name}-{cmd}", "plan", argv, *with_model, outputs))
    # a plan for another target: estimate on this one says which to pass; on its own it runs
    out.append(
        Case(
            "plan_other_target-estimate",
            "plan",
            ("estimate", "{valid}", "--plan", "{plan_other_target}", "--cost", "analytic"),
            1,
            "pass --target ascend310p",
        )
    )
    return out


# -- specs and --set ------------------------------------------------------------------------------
SPECS = {
    "missing_field": "missing field(s) clock_hz",
    "negative": "clock_hz must be > 0",
    "nan": "clock_hz must be a number",
    "unknown_field": "unknown field(s) warp_speed",
    "not_toml": "not valid toml",
    "zero_cores": "cube_cores must be > 0",
}
SETS = {
    "clock_hz=fast": (1, "clock_hz must be a number"),
    "clock_hz=inf": (1, "must be a finite number"),
    "clock_hz=nan": (1, "clock_hz must be a number"),
    "clock_hz=-1": (1, "clock_hz must be > 0"),
    "cube_cores=inf": (1, "must be a finite number"),
    "cube_cores=2.5": (1, "whole number"),
    "cube_cores=0": (1, "cube_cores must be > 0"),
    "warp_speed=9": (1, "unknown spec field"),
    "clock_hz": (1, "expects field=value"),
    "l2_bytes=0": (0, ""),  # a what-if: no L2
}


def _spec_cases() -> list[Case]:
    out = []
    for name, says in SPECS.items():
        t = "{spec_" + name + "}"
        out.append(
            Case(f"spec_{name}-estimate", "spec", ("estimate", "{valid}", "--target", t), 1, says)
        )
        out.append(
            Case(
                f"spec_{name}-tune",
                "spec",
                (
                    "tune",
                    "{valid}",
                    "--target",
                    t,
                    "--trials",
                    "1",
                    "-o",
                    "{tmp}/p.json",
                    "--storage",
                    "{tmp}/s.journal",
                ),
                1,
                says,
                ("{tmp}/p.json",),
            )
        )
    for value, (code, says) in SETS.items():
        argv = ("estimate", "{valid}", "--set", value, "--cost", "simulator")
        out.append(Case(f"set_{value}", "spec", argv, code, says))
    return out


# -- command-line values --------------------------------------------------------------------------
TUNE = ("tune", "{valid}", "--cost", "analytic", "--polish", "0")
FRESH = ("-o", "{tmp}/p.json", "--storage", "{tmp}/s.journal")
CLI: list[Case] = [
    Case("trials_0", "cli", (*TUNE, "--trials", "0", *FRESH), 1, "--trials", ("{tmp}/p.json",)),
    Case("trials_-5", "cli", (*TUNE, "--trials", "-5", *FRESH), 1, "--trials", ("{tmp}/p.json",)),
    Case("trials_word", "cli", (*TUNE, "--trials", "many", *FRESH), 2, "", ("{tmp}/p.json",)),
    Case("timeout_0", "cli", (*TUNE, "--timeout", "0", *FRESH), 1, "--timeout", ("{tmp}/p.json",)),
    Case(
        "timeout_-1", "cli", (*TUNE, "--timeout", "-1", *FRESH), 1, "--timeout", ("{tmp}/p.json",)
    ),
    Case("sampler", "cli", (*TUNE, "--sampler", "nope", *FRESH), 1, "unknown sampler"),
    Case("strategy", "cli", (*TUNE, "--strategy", "nope", *FRESH), 1, "unknown strategy"),
    Case("objective", "cli", (*TUNE, "--objective", "speed", *FRESH), 1, "unknown objective"),
    Case("precision", "cli", (*TUNE, "--precision", "fp8", *FRESH), 1, "unknown precision"),
    Case("target", "cli", (*TUNE, "--target", "ascend999", *FRESH), 1, "unknown target"),
    Case("cost", "cli", (*TUNE, "--cost", "oracle", *FRESH), 1, "unknown cost model"),
    Case("polish_-1", "cli", (*TUNE, "--polish", "-1", *FRESH), 1, "--polish"),
    Case("o_missing_dir", "cli", (*TUNE, "--trials", "1", "-o", "{no_dir}"), 1, "does not exist"),
    Case(
        "o_under_a_file",
        "cli",
        (*TUNE, "--trials", "1", "-o", "{text_file}/p.json", "--storage", "{tmp}/s.journal"),
        1,
        "is a file, not a folder",
    ),
    Case("o_is_a_folder", "cli", (*TUNE, "--trials", "1", "-o", "{tmp}"), 1, "is a folder"),
    Case(
        "o_is_model",
        "cli",
        (*TUNE, "--trials", "1", "-o", "{valid}", "--storage", "{tmp}/s.journal"),
        1,
        "is the model",
    ),
    Case(
        "o_is_storage",
        "cli",
        (*TUNE, "--trials", "1", "-o", "{tmp}/s.journal", "--storage", "{tmp}/s.journal"),
        1,
        "is the study's storage",
    ),
    Case(
        "dataset_is_storage",
        "cli",
        (*TUNE, "--trials", "1", *FRESH, "--dataset", "{tmp}/s.journal"),
        1,
        "is the study's storage",
        ("{tmp}/p.json",),
    ),
    Case(
        "dataset_is_model",
        "cli",
        (*TUNE, "--trials", "1", *FRESH, "--dataset", "{valid}"),
        1,
        "is the model",
        ("{tmp}/p.json",),
    ),
    Case(
        "dataset_is_text",
        "cli",
        (*TUNE, "--trials", "1", *FRESH, "--dataset", "{text_file}"),
        1,
        "not a measurements table",
        ("{tmp}/p.json",),
    ),
    Case(
        "storage_is_model",
        "cli",
        (*TUNE, "--trials", "1", "-o", "{tmp}/p.json", "--storage", "{valid}"),
        1,
        "neither a .journal",
        ("{tmp}/p.json",),
    ),
    Case(
        "storage_not_journal",
        "cli",
        (*TUNE, "--trials", "1", "-o", "{tmp}/p.json", "--storage", "{not_journal}"),
        1,
        "not an optuna journal",
        ("{tmp}/p.json",),
    ),
    Case(
        "storage_no_folder",
        "cli",
        (*TUNE, "--trials", "1", "-o", "{tmp}/p.json", "--storage", "{tmp}/nope/s.journal"),
        1,
        "does not exist",
        ("{tmp}/p.json",),
    ),
    Case(
        "storage_no_driver",
        "cli",
        (
            *TUNE,
            "--trials",
            "1",
            "-o",
            "{tmp}/p.json",
            "--storage",
            "postgresql+nodriver://u@127.0.0.1:1/db",
        ),
        1,
        "storage",
        ("{tmp}/p.json",),
    ),
    Case(
        "storage_bad_scheme",
        "cli",
        (*TUNE, "--trials", "1", "-o", "{tmp}/p.json", "--storage", "mysql+nope://x"),
        1,
        "not a database",
        ("{tmp}/p.json",),
    ),
    Case(
        "storage_sqlite_no_dir",
        "cli",
        (*TUNE, "--trials", "1", "-o", "{tmp}/p.json", "--storage", "sqlite:///{tmp}/nope/s.db"),
        1,
        "cannot open storage",
        ("{tmp}/p.json",),
    ),
    Case(
        "apply_o_is_model",
        "cli",
        ("apply", "{valid}", "{plan_valid}", "-o", "{valid}"),
        1,
        "is the model",
    ),
    Case(
        "apply_o_is_plan",
        "cli",
        ("apply", "{valid}", "{plan_valid}", "-o", "{plan_valid}"),
        1,
        "is the plan",
    ),
    Case(
        "apply_o_missing_dir",
        "cli",
        ("apply", "{valid}", "{plan_valid}", "-o", "{no_dir}"),
        1,
        "does not exist",
    ),
    Case("apply_no_o", "cli", ("apply", "{valid}", "{plan_valid}"), 2),
    Case(
        "calibrate_samples_0",
        "cli",
        ("calibrate", "--models", "{valid}", "--samples", "0", "-o", "{tmp}/t.parquet"),
        1,
        "--samples",
        ("{tmp}/t.parquet",),
    ),
    Case(
        "calibrate_warm_2",
        "cli",
        (
            "calibrate",
            "--models",
            "{valid}",
            "--samples",
            "2",
            "--warm",
            "2",
            "-o",
            "{tmp}/t.parquet",
        ),
        1,
        "--warm",
        ("{tmp}/t.parquet",),
    ),
    Case(
        "calibrate_o_is_model",
        "cli",
        ("calibrate", "--models", "{valid}", "--samples", "2", "-o", "{valid}"),
        1,
        "is the --models",
    ),
    Case(
        "calibrate_msprof_text",
        "cli",
        (
            "calibrate",
            "--from-msprof",
            "{text_file}",
            "--model",
            "{valid}",
            "-o",
            "{tmp}/t.parquet",
        ),
        1,
        "not an msprof",
        ("{tmp}/t.parquet",),
    ),
    Case(
        "input_shape_bad",
        "cli",
        ("inspect", "{valid}", "--input-shape", "x=axb"),
        1,
        "--input-shape expects",
    ),
    Case(
        "input_shape_unknown",
        "cli",
        ("inspect", "{valid}", "--input-shape", "q=1x2"),
        1,
        "not a graph input",
    ),
    Case(
        "input_shape_rank", "cli", ("inspect", "{valid}", "--input-shape", "x=4x64x2"), 1, "rank"
    ),
    Case("zoo_scale_0", "cli", ("inspect", "zoo:bert-base", "--scale", "0"), 1, "scale"),
    Case("zoo_layers_-1", "cli", ("inspect", "zoo:bert-base", "--layers", "-1"), 1, "layers"),
    Case("zoo_unknown", "cli", ("inspect", "zoo:nope"), 1, "unknown zoo model"),
    Case(
        "config_missing",
        "cli",
        ("estimate", "{valid}", "--config", "{tmp}/nope.toml"),
        1,
        "not found",
    ),
    Case(
        "config_not_toml", "cli", ("estimate", "{valid}", "--config", "{spec_not_toml}"), 1, "toml"
    ),
    Case("unknown_command", "cli", ("frobnicate",), 2),
]

ALL: list[Case] = (
    _model_cases() + _plan_cases() + _spec_cases() + CLI + OUTPUT + cases_input.input_cases()
)
