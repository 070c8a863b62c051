"""A throwaway PostgreSQL server on loopback: Debian's ``postgresql`` binaries, a temporary data
directory, trust authentication on 127.0.0.1 only, a free TCP port. Shared by
tests/autotune/test_postgres.py and experiments/bench_workers.py (which imports it by path).

initdb and pg_ctl refuse to run as root, so as root they run as the ``postgres`` user (which
Debian's package creates), in a folder that user owns. ``make postgres`` installs the package.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PgServer", "find_bin", "pg_server"]

START_TIMEOUT_S = 30


@dataclass(frozen=True)
class PgServer:
    """A running server: its binaries, its folder (data, socket, log) and its port."""

    bin: Path
    root: Path
    port: int

    def url(self, db: str) -> str:
        """The storage URL of database ``db`` (what ``autotune tune --storage`` takes)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def create_db(self, db: str) -> str:
        """Create database ``db``; its URL."""
        _run_as_owner([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                       "-U", "postgres", db])  # fmt: skip
        return self.url(db)


def find_bin() -> Path:
    """The newest /usr/lib/postgresql/N/bin holding initdb.

    Raises:
        RuntimeError: no PostgreSQL server binaries (naming how to install them).
    """
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if not found:
        raise RuntimeError(
            "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb): run "
            "`make postgres` (apt-get install postgresql)"
        )
    return found[-1].parent


@contextmanager
def pg_server(durable: bool = False) -> Iterator[PgServer]:
    """Start a server in a fresh temporary folder; stop it (fast) and remove the folder after.
    Not ``durable``: fsync off (a test's server dies with its data; a benchmark compares it
    durable with the journal file, which syncs every write).

    Raises:
        RuntimeError: no binaries, or a server that did not start (its log's tail attached).
    """
    bin_dir = find_bin()
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    _give_to_owner(root)
    data = root / "data"
    try:
        _run_as_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                       "--auth=trust", "-E", "UTF8", "--no-sync"])  # fmt: skip
        yield _start(bin_dir, root, data, durable)
    finally:
        if (data / "postmaster.pid").exists():  # also one that pg_ctl gave up waiting for
            _run_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "stop", "-m", "fast", "-w"],
                          check=False)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def _start(bin_dir: Path, root: Path, data: Path, durable: bool) -> PgServer:
    """pg_ctl start on a free port (another one if it was taken meanwhile, up to 3 tries).

    Raises:
        RuntimeError: the server did not start (with its log's tail).
    """
    log, res = root / "server.log", None
    for _ in range(3):
        port = _free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c max_connections=200"
        if not durable:
            options += " -c fsync=off -c full_page_writes=off"
        res = _run_as_owner(
            [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
             "-w", "-t", str(START_TIMEOUT_S), "start"],
            check=False,
        )  # fmt: skip
        if res.returncode == 0:
            return PgServer(bin_dir, root, port)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise RuntimeError(f"PostgreSQL did not start:\n{tail or (res.stderr if res else '')}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_root() -> bool:
    return os.geteuid() == 0


def _give_to_owner(path: Path) -> None:
    """As root: hand ``path`` to the postgres user (initdb wants the data folder its own)."""
    if _as_root():
        user = pwd.getpwnam("postgres")
        os.chown(path, user.pw_uid, user.pw_gid)
    path.chmod(0o700)


def _run_as_owner(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL tool as the server's owner: the postgres user when we are root."""
    full = ["runuser", "-u", "postgres", "--", *cmd] if _as_root() else cmd
    res = subprocess.run(full, capture_output=True, text=True, timeout=120, cwd="/")
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:1])} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return res
