"""The corpus of damaged storage and input the tool must refuse (issue 47): journals of valid
JSON that are no Optuna journal, a read-only folder (a tmpfs mounted read-only), files nested
thousands of levels deep, a measurements table where a plan belongs, and two servers that are
no Dask scheduler (one takes the connection and says nothing, one answers junk).

``build_input(folder)`` is one of :data:`corpus.BUILDERS`; what it cannot make here (the
mount needs root) is left out and named in :data:`UNAVAILABLE` with the reason, and the cases
that need it are skipped with that reason.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import optuna
import pandas as pd

__all__ = ["UNAVAILABLE", "build_input"]

DEPTH = 5000  # levels of nesting: past Python's recursion limit (1000)
UNAVAILABLE: dict[str, str] = {}  # corpus name -> why it could not be made here


def _journal(path: Path) -> Path:
    """A real Optuna journal: one study, one complete trial (made anew)."""
    path.unlink(missing_ok=True)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="corpus", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    return path


def _journals(d: Path) -> dict[str, Path]:
    valid = _journal(d / "journal_valid.journal")
    lines = valid.read_bytes().splitlines(keepends=True)
    variants = {
        "journal_not_ops": [*lines, b'{"note": "valid JSON, no operation"}\n'],
        "journal_unknown_op": [*lines, b'{"op_code": 99, "worker_id": "w"}\n'],
        "journal_missing_fields": [*lines, b'{"op_code": 0, "worker_id": "w"}\n'],
        "journal_blank_line": [lines[0], b"\n", *lines[1:]],
    }
    out = {"journal_valid": valid}
    for name, body in variants.items():
        out[name] = d / f"{name}.journal"
        out[name].write_bytes(b"".join(body))
    return out


def _read_only_dir(journal: Path) -> dict[str, Path]:
    """A folder on a tmpfs remounted read-only, holding a copy of ``journal`` (as root;
    unmounted when the process ends). Outside the corpus folder, which is removed first."""
    where = Path(tempfile.mkdtemp(prefix="autotune-ro-"))
    steps = (
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
        ["cp", str(journal), str(where / "s.journal")],
        ["mount", "-o", "remount,ro", str(where)],
    )
    for i, step in enumerate(steps):
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode:
            if i:
                subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
            where.rmdir()
            UNAVAILABLE["ro_dir"] = f"cannot mount a tmpfs read-only here: {done.stderr.strip()}"
            return {}
    atexit.register(_unmount, where)
    return {"ro_dir": where}


def _unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
    shutil.rmtree(where, ignore_errors=True)


def _deep(d: Path) -> dict[str, Path]:
    n = DEPTH
    files = {
        "plan_deep": ("plan_deep.json", "[" * n + "]" * n),
        "config_deep": ("config_deep.toml", "[policy]\nx = " + "[" * n + "]" * n + "\n"),
        "spec_deep": ("spec_deep.toml", "x = " + "{a = " * n + "1" + "}" * n + "\n"),
        "cost_model_deep": ("cost_model_deep.json", '{"a": ' * n + "1" + "}" * n),
    }
    out = {}
    for name, (file, text) in files.items():
        out[name] = d / file
        out[name].write_text(text)
    out["measurements"] = d / "measurements.parquet"
    pd.DataFrame({"kernel": ["{}"], "latency_us": [1.0]}).to_parquet(out["measurements"])
    return out


def _server(answer: bytes | None) -> int:
    """A TCP server on loopback (a daemon thread, for the process's life) that takes every
    connection and sends ``answer`` (None: nothing, ever); its port."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            conn, _ = sock.accept()
            if answer is not None:
                conn.sendall(answer)
            held.append(conn)  # kept open: the other end waits

    threading.Thread(target=serve, daemon=True).start()
    return int(sock.getsockname()[1])


def build_input(d: Path) -> dict[str, Path]:
    """Write this corpus into ``d`` (the servers' ports are corpus entries too: a name to
    put in an address, no file)."""
    out = {**_journals(d), **_deep(d)}
    out.update(_read_only_dir(out["journal_valid"]))
    out["silent_port"] = Path(str(_server(None)))
    http = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + bytes(range(256))
    out["junk_port"] = Path(str(_server(http)))
    return out
