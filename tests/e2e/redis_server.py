"""A private ``redis-server`` for fault tests: its own port and directory, no persistence.

Fault tests restart, freeze and kill Redis, so they must never use the machine's shared Redis
(6379): :class:`RedisServer` starts ``redis-server`` on a free port with ``--save "" --appendonly
no`` in a temporary directory. :meth:`restart_empty` kills it (SIGKILL, like a crash) and starts a
new, empty one on the same port; :meth:`freeze` / :meth:`thaw` send SIGSTOP / SIGCONT; :meth:`stop`
always ends it (thawing first). Use it as a context manager so it is stopped on every exit path.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest

from hearth.testing.server_thread import free_port
from tests.support import start_redis_server

REDIS_SERVER = shutil.which("redis-server")


class RedisServer:
    def __init__(self, directory: Path, port: int | None = None) -> None:
        if REDIS_SERVER is None:
            pytest.skip("redis-server is not installed")
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def start(self, timeout: float = 10.0) -> float:
        """Start an empty server on :attr:`port`; returns the monotonic time it was ready (its own log says so:
        ``tests.support.start_redis_server``, which also retries while a previous instance still holds the port)."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("redis-server is already running")
        self.proc, _ = start_redis_server(self.log_path, "--dir", str(self.directory), "--dbfilename",
                                          "never-written.rdb", "--databases", "1", "--maxclients", "10000",
                                          port=self.port, timeout_s=timeout)
        return time.monotonic()

    def ping(self, timeout: float = 0.5) -> bool:
        """True if the server answers PING (a frozen server does not)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def restart_empty(self) -> float:
        """Crash the server (SIGKILL) and start a new, empty one on the same port.

        Returns the monotonic time the new server was ready: when the fault ended. It is empty by construction
        (no persistence, a dbfilename never written); a DBSIZE here raced the clients' reconnects (keys written
        within milliseconds of the start, seen when tests ran side by side).
        """
        self._kill()
        return self.start()

    def freeze(self) -> None:
        """SIGSTOP: connections stay open, nothing is answered (commands queue in the socket)."""
        assert self.proc is not None and self.proc.poll() is None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> float:
        """SIGCONT; returns the monotonic time the server answered PING again."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.frozen = False
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.ping():
                return time.monotonic()
            time.sleep(0.005)
        raise TimeoutError("redis-server did not answer after SIGCONT")

    def stop(self) -> None:
        self._kill()

    def _kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            if self.frozen:
                os.kill(proc.pid, signal.SIGCONT)
                self.frozen = False
            proc.kill()
        proc.wait(10)
        self.proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
