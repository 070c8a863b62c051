"""``autotune dashboard``: optuna-dashboard on the storage the tuner used, with the study's
artifacts (the saved plans), on loopback unless told otherwise."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.common import err, out, user_errors

__all__ = ["dashboard", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@user_errors
def dashboard(
    storage: Annotated[
        str | None,
        typer.Option(help="The study storage: a .journal file or an Optuna URL."),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    artifact_dir: Annotated[
        Path | None,
        typer.Option(help="Artifacts to serve (default: <journal>.artifacts beside it)."),
    ] = None,
) -> None:
    """Serve optuna-dashboard on a tuning study's storage (the trials, their notes and the
    saved plans)."""
    import optuna
    from optuna.artifacts import FileSystemArtifactStore
    from optuna_dashboard import run_server

    from autotune.exceptions import AutotuneError
    from autotune.tuner.annotate import artifact_dir as default_artifacts
    from autotune.tuner.study import DEFAULT_STORAGE, journal_path, open_storage

    journal = journal_path(storage)
    if journal is not None and not journal.is_file():
        raise AutotuneError(
            f"storage '{journal}' does not exist: run `autotune tune` first, or give "
            "--storage FILE.journal (or an Optuna URL) of a study"
        )
    opened, name = open_storage(storage)
    studies = optuna.get_all_study_summaries(opened)
    if not studies:
        raise AutotuneError(f"storage '{name}' holds no study: run `autotune tune` first")
    if not is_loopback(host):
        err.print(
            f"warning: listening on {host}: anyone who can reach this machine can read and "
            "change the studies (there is no login); use --host 127.0.0.1 to keep it local",
            highlight=False,
        )
    folder = artifact_dir or default_artifacts(name if storage else DEFAULT_STORAGE)
    folder.mkdir(parents=True, exist_ok=True)
    names = ", ".join(s.study_name for s in studies)
    out.print(
        f"optuna-dashboard: {len(studies)} stud{'y' if len(studies) == 1 else 'ies'} "
        f"({names}) at http://{host}:{port}/dashboard (Ctrl-C stops it)",
        highlight=False,
    )
    run_server(opened, host=host, port=port, artifact_store=FileSystemArtifactStore(str(folder)))
