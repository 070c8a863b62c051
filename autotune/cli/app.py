"""The ``autotune`` command line (typer + rich): the app and its command groups.

Exit codes: 0 ok, 1 a user error reported in one line (no traceback), 2 a usage error.
Commands live in :mod:`.explore` (inspect, estimate, candidates, zoo), :mod:`.tuning` (tune,
report, apply, verify), :mod:`.codegen` (codegen, run), :mod:`.dashboard` and
:mod:`.costmodel` (calibrate, costmodel eval); flags they share are declared once in
:mod:`.common`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli import codegen, costmodel, dashboard, explore, plans, tuning
from autotune.cli.common import out, say_log_lines
from autotune.startup import starting

__all__ = ["app", "main"]

app = typer.Typer(
    name="autotune",
    help="Search-based operator fusion and tiling for Ascend NPUs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
zoo_app = typer.Typer(help="Built-in models (built in code, no downloads).", no_args_is_help=True)
costmodel_app = typer.Typer(help="Cost-model accuracy and artifacts.", no_args_is_help=True)


def _version(value: bool) -> None:
    if value:
        from autotune import __version__

        out.print(f"autotune {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Search-based operator fusion and tiling for Ascend NPUs."""
    say_log_lines()


app.command("inspect")(explore.inspect)
app.command("estimate")(explore.estimate)
app.command("candidates")(explore.candidates)
app.command("tune")(tuning.tune)
app.command("report")(plans.report)
app.command("apply")(plans.apply)
app.command("verify")(plans.verify)
app.command("codegen")(codegen.codegen)
app.command("run")(codegen.run)
app.command("dashboard")(dashboard.dashboard)
app.command("calibrate")(costmodel.calibrate)
costmodel_app.command("eval")(costmodel.costmodel_eval)
zoo_app.command("list")(explore.zoo_list)
zoo_app.command("export")(explore.zoo_export)
app.add_typer(costmodel_app, name="costmodel")
app.add_typer(zoo_app, name="zoo")


def main() -> None:
    """Run the command line: a Ctrl-C before a command runs ends in one line (exit status
    130; :mod:`autotune.startup`), one after it is the command's to handle."""
    starting()
    app()
