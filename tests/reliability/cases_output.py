"""The output and hostile-name cases (issue 47), in the form of :mod:`cases` (``ALL`` holds
them): an output that would destroy a file (an input of the command, a study's storage, a
file of another kind), a write to a device, a full disk or a read-only folder, and a model
whose file, op and tensor names carry terminal escape sequences.

An :class:`OutputCase` may copy corpus files into its folder first (``copies``: the file it
writes over), run on a small disk (``disk``: ``{tmp}/disk`` a tmpfs, ``full`` or ``ro``), and
name the files that must stay whole (``kept``: byte for byte; ``appended``: its old bytes
then whole records, as a journal grows). Every case, like all of ``ALL``: no traceback, no
raw control character on stdout or stderr, no temporary file left.
"""

from __future__ import annotations

from dataclasses import dataclass

from corpus_output import EVIL

__all__ = ["OUTPUT", "OutputCase"]


@dataclass(frozen=True)
class OutputCase:
    """One command line, its expected outcome (as :class:`cases.Case`), and its setting."""

    id: str
    category: str
    argv: tuple[str, ...]
    code: int
    says: str = ""
    outputs: tuple[str, ...] = ()
    copies: tuple[tuple[str, str], ...] = ()  # (corpus file, path under {tmp}) before the run
    disk: str = ""  # "full" or "ro": {tmp}/disk is a small tmpfs, filled or read-only
    kept: tuple[str, ...] = ()  # files that must be byte for byte as before
    appended: tuple[str, ...] = ()  # files that must be their old bytes then whole records
    how: str = ""  # always in-process (:class:`cases.Case`'s)


TUNE = ("tune", "{valid}", "--trials", "1", "--cost", "analytic", "--polish", "0")
STORE = ("--storage", "{tmp}/s.journal")
APPLY = ("apply", "{valid}", "{plan_valid}", "-o")
REPORT = ("report", "{plan_valid}", "--html")
CALIBRATE = ("calibrate", "--models", "{valid}", "--samples", "2", "-o")
ZOO = ("zoo", "export", "transformer-base", "--scale", "0.1", "--layers", "1", "-o")
JOURNAL = "is an optuna journal"


def _refused() -> list[OutputCase]:
    """Outputs over a file they would destroy: one line, exit 1, the file as it was."""
    rows = [  # id, argv, phrase
        ("report_html_is_journal", (*REPORT, "{journal}"), JOURNAL),
        ("apply_o_is_journal", (*APPLY, "{journal}"), JOURNAL),
        ("tune_o_is_journal", (*TUNE, *STORE, "-o", "{journal}"), JOURNAL),
        ("calibrate_o_is_journal", (*CALIBRATE, "{journal}"), JOURNAL),
        (
            "run_o_is_journal",
            ("run", "{valid}", "{plan_valid}", "--inputs", "{text_file}", "-o", "{journal}"),
            JOURNAL,
        ),
        ("report_html_is_model", (*REPORT, "{valid}"), "is an onnx model, not an html page"),
        ("zoo_export_over_model", (*ZOO, "{valid}"), "onnx model this tool did not write"),
        ("apply_o_over_users_model", (*APPLY, "{hostile}"), "onnx model this tool did not"),
        (
            "candidates_html_is_config",
            ("candidates", "{valid}", "--html", "{config_toml}"),
            "is a toml file",
        ),
        (
            "candidates_html_is_its_config",
            ("candidates", "{valid}", "--config", "{config_toml}", "--html", "{config_toml}"),
            "is the --config",
        ),
        ("tune_o_is_parquet", (*TUNE, *STORE, "-o", "{parquet}"), "is a parquet table"),
        ("tune_o_is_plan_html", (*TUNE, *STORE, "-o", "{html_page}"), "is an html page"),
        (
            "calibrate_fit_is_parquet",
            (*CALIBRATE, "{tmp}/t.parquet", "--fit", "{parquet}"),
            "is a parquet table",
        ),
        ("zoo_export_over_text", (*ZOO, "{text_file}"), "is a text file"),
        ("report_html_new_journal_name", (*REPORT, "{tmp}/r.journal"), "study's storage"),
        (
            "tune_o_is_sqlite_storage",
            (*TUNE, "--storage", "sqlite:///{tmp}/s.db", "-o", "{tmp}/s.db"),
            "is the study's storage",
        ),
        (
            "codegen_o_is_model_forced",
            ("codegen", "{valid}", "{plan_valid}", "-o", "{valid}", "--force"),
            "is the model",
        ),
        ("report_html_is_plan_forced", (*REPORT, "{plan_valid}", "--force"), "is the plan"),
    ]
    devices = {
        "apply_o_device": (*APPLY, "{full_device}"),
        "tune_o_device": (*TUNE, *STORE, "-o", "{full_device}"),
        "report_html_device": (*REPORT, "{full_device}"),
        "zoo_export_device": (*ZOO, "{full_device}"),
        "calibrate_o_device": (*CALIBRATE, "{full_device}"),
        "apply_o_device_forced": (*APPLY, "{full_device}", "--force"),
    }
    rows += [(k, argv, "is not a regular file") for k, argv in devices.items()]
    return [OutputCase(i, "output", argv, 1, says) for i, argv, says in rows]


def _allowed() -> list[OutputCase]:
    """A file of the output's own kind is replaced as before; another kind with --force."""
    rows = [  # id, corpus file copied to {tmp}/<name>, argv
        ("tune_o_over_plan", "plan_valid", "p.json", (*TUNE, *STORE, "-o", "{tmp}/p.json")),
        ("apply_o_over_fused", "fused_model", "f.onnx", (*APPLY, "{tmp}/f.onnx")),
        ("report_html_over_page", "html_page", "r.html", (*REPORT, "{tmp}/r.html")),
        (
            "report_html_over_journal_forced",
            "journal",
            "j.journal",
            (*REPORT, "{tmp}/j.journal", "--force"),
        ),
        ("apply_o_over_model_forced", "valid", "m.onnx", (*APPLY, "{tmp}/m.onnx", "--force")),
    ]
    return [
        OutputCase(i, "output", argv, 0, copies=((src, "{tmp}/" + name),))
        for i, src, name, argv in rows
    ]


NO_SPACE = "no space left on device"
READ_ONLY = "read-only file system"


def _disks() -> list[OutputCase]:
    """Writes on a full disk and into a read-only folder: one line, the old file whole, no
    temporary file left."""
    rows = [  # id, corpus file, its name on the disk, argv (the output on the disk)
        ("tune_o", "plan_valid", "p.json", (*TUNE, *STORE, "-o", "{tmp}/disk/p.json")),
        ("apply_o", "fused_model", "f.onnx", (*APPLY, "{tmp}/disk/f.onnx")),
        ("report_html", "html_page", "r.html", (*REPORT, "{tmp}/disk/r.html")),
        ("calibrate_o", "parquet", "t.parquet", (*CALIBRATE, "{tmp}/disk/t.parquet")),
        ("zoo_export", "fused_model", "z.onnx", (*ZOO, "{tmp}/disk/z.onnx")),
    ]
    out = []
    for disk, says in (("full", NO_SPACE), ("ro", READ_ONLY)):
        for i, src, name, argv in rows:
            path = "{tmp}/disk/" + name
            out.append(
                OutputCase(f"{disk}_{i}", "disk", argv, 1, says, (), ((src, path),), disk, (path,))
            )
        journal = "{tmp}/disk/s.journal"
        argv = (*TUNE, "--storage", journal, "-o", "{tmp}/p.json")
        out.append(
            OutputCase(
                f"{disk}_journal",
                "disk",
                argv,
                1,
                says,
                ("{tmp}/p.json",),
                (("journal", journal),),
                disk,
                appended=(journal,),
            )
        )
    return out


def _names() -> list[OutputCase]:
    """A model whose file, op and tensor names carry escape sequences: every command shows
    them escaped (the harness fails any raw control character on stdout or stderr)."""
    m = "{hostile}"
    plan = "{tmp}/p" + EVIL + ".json"
    rows = [
        ("inspect", ("inspect", m, "--ops"), 0, ""),
        ("estimate", ("estimate", m, "--cost", "analytic"), 0, ""),
        ("candidates", ("candidates", m), 0, ""),
        (
            "tune",
            (
                "tune",
                m,
                "--trials",
                "2",
                "--cost",
                "analytic",
                "--polish",
                "0",
                "-o",
                plan,
                *STORE,
            ),
            0,
            "",
        ),
        (
            "calibrate",
            ("calibrate", "--models", m, "--samples", "2", "-o", "{tmp}/t.parquet"),
            0,
            "",
        ),
        ("missing", ("inspect", "{hostile_missing}"), 1, "not found"),
        ("bytes", ("estimate", "{hostile_bytes}", "--cost", "analytic"), 0, ""),
        (
            "bytes_o_is_model",
            ("apply", "{hostile_bytes}", "{plan_valid}", "-o", "{hostile_bytes}"),
            1,
            "is the model",
        ),
        ("apply_other_plan", ("apply", m, "{plan_valid}", "-o", "{tmp}/f.onnx"), 1, "plan"),
        ("verify_other_plan", ("verify", m, "{plan_valid}"), 1, "plan"),
        ("input_shape", ("inspect", m, "--input-shape", f"q{EVIL}=1x2"), 1, "not a graph input"),
        ("o_is_model", ("apply", m, "{plan_valid}", "-o", m), 1, "is the model"),
        (
            "o_no_folder",
            ("apply", "{valid}", "{plan_valid}", "-o", f"{{tmp}}/{EVIL}/f.onnx"),
            1,
            "does not exist",
        ),
    ]
    return [OutputCase(f"names_{i}", "names", argv, c, s) for i, argv, c, s in rows]


OUTPUT: list[OutputCase] = _refused() + _allowed() + _disks() + _names()
