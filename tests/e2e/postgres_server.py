"""A private PostgreSQL instance for fault tests: its own data directory, port and socket directory.

Fault tests stop and restart the database, so they must never touch the machine's shared PostgreSQL
(5432): :class:`PostgresServer` runs ``initdb`` into a fresh temporary directory and ``pg_ctl start``
on a free port (TCP on 127.0.0.1 only, ``trust`` authentication, ``fsync=off`` — durability across a
machine crash is not what these tests check; a restart keeps every committed row all the same).
:meth:`restart` stops it (``-m fast``: sessions are terminated, as in an operator's restart or a
failover), keeps it down for a moment, and starts it again on the same port. :meth:`stop` always ends
it and removes the directory. Use it as a context manager.

PostgreSQL refuses to run as root; when the tests do, the server runs as the ``postgres`` system user
(``runuser``), in a directory owned by it. Missing binaries skip the test — under ``CI=true`` they fail it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest

from hearth.testing.server_thread import free_port
from tests.support import IN_CI


def _bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<v>/bin`` with initdb and pg_ctl, else the directory of ``pg_ctl`` on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2])
                   if p.split("/")[-2].isdigit() else 0)
    for candidate in reversed(found):
        if os.access(f"{candidate}/initdb", os.X_OK) and os.access(f"{candidate}/pg_ctl", os.X_OK):
            return Path(candidate)
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl and shutil.which("initdb"):
        return Path(os.path.realpath(pg_ctl)).parent
    return None


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason}; CI requires a private PostgreSQL for the fault tests", pytrace=False)
    pytest.skip(reason)


class PostgresServer:
    def __init__(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            _unavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
            raise AssertionError("unreachable")
        self.bin = bin_dir
        self.as_user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                _unavailable("running as root and there is no `postgres` user to run PostgreSQL as")
            if shutil.which("runuser") is None:
                _unavailable("running as root and `runuser` is missing (PostgreSQL refuses to run as root)")
            self.as_user = "postgres"
        # Not pytest's tmp_path: its parents are private to root, and the server may run as `postgres`.
        self.directory = Path(tempfile.mkdtemp(prefix="hearth-pg-"))
        if self.as_user is not None:
            entry = pwd.getpwnam(self.as_user)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        self.data = self.directory / "data"
        self.log_path = self.directory / "postgres.log"
        self.port = free_port()
        self.running = False
        self.restarts = 0

    @property
    def admin_dsn(self) -> str:
        """asyncpg / libpq form, database ``postgres``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self.as_user is not None:
            cmd = ["runuser", "-u", self.as_user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.directory)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({done.returncode}): {done.stdout[-1500:]}"
                               f"{done.stderr[-1500:]}\nserver log: {self.log_tail()}")
        return done

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-N", "-E", "UTF8",
                  "--locale", "C")

    def start(self, timeout: float = 30) -> float:
        """Start the server on :attr:`port`; returns the monotonic time it accepted connections."""
        options = (f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-o", options, "-w",
                  "-t", str(int(timeout)), "start", timeout=timeout + 5)
        self.running = True
        return time.monotonic()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: terminate sessions, checkpoint; ``immediate``: like a crash)."""
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop", timeout=35)
            self.running = False

    def restart(self, down_s: float = 1.0) -> tuple[float, float]:
        """Stop (``-m fast``), stay down ``down_s`` seconds, start again: (monotonic time down, time up)."""
        self.stop("fast")
        went_down = time.monotonic()
        time.sleep(down_s)  # the outage itself, not a wait for a condition
        up = self.start()
        self.restarts += 1
        return went_down, up

    def create_database(self, name: str) -> str:
        """Create database ``name`` (with ``createdb``) and return its SQLAlchemy URL."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return self.url(name)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def close(self) -> None:
        try:
            if self.running:
                try:
                    self.stop("immediate")
                except (RuntimeError, subprocess.TimeoutExpired):
                    pidfile = self.data / "postmaster.pid"
                    if pidfile.exists():
                        os.kill(int(pidfile.read_text().split()[0]), 9)
                    self.running = False
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            self.init()
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
