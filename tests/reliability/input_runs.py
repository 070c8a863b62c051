"""How a case runs (:class:`cases.Case` ``how``): in-process through typer's runner, or as a
real ``python -m autotune`` process sent Ctrl-C (SIGINT) as it starts; and which corpus files
a case needs that could not be made here."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cases import Case
from corpus_input import UNAVAILABLE
from typer.testing import CliRunner

from autotune.cli import app

__all__ = ["Ran", "invoke", "unavailable"]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # for the library to load: a busy machine imports slowly


@dataclass(frozen=True)
class Ran:
    """What a run did, as typer's runner reports it."""

    exit_code: int
    output: str  # stdout and stderr
    stderr: str
    exception: BaseException | None = None


def unavailable(case: Case) -> str | None:
    """Why a case cannot run here (a corpus file it names could not be made), or None."""
    names = {n for a in case.argv for n in re.findall(r"{(\w+)}", a)}
    why = [UNAVAILABLE[n] for n in sorted(names) if n in UNAVAILABLE]
    return why[0] if why else None


def invoke(case: Case, argv: list[str], tmp: Path) -> Ran:
    """Run ``argv`` as ``case`` says."""
    if case.how.startswith("sigint:"):
        return _interrupted(argv, case.how.removeprefix("sigint:"), tmp)
    res = CliRunner().invoke(app, argv)
    return Ran(res.exit_code, res.output, res.stderr, res.exception)


def _interrupted(argv: list[str], library: str, tmp: Path) -> Ran:
    """A real process of ``argv``, sent SIGINT as soon as it has mapped a file whose path
    holds ``library`` (a shared library its start-up loads)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", *argv],
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    end = time.monotonic() + WAIT_S
    while proc.poll() is None and time.monotonic() < end:
        try:
            if library in Path(f"/proc/{proc.pid}/maps").read_text():
                break
        except OSError:
            pass
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=WAIT_S)
    return Ran(proc.returncode, out + err, err)  # killed by the signal: its negative
