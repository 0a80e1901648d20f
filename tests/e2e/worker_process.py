"""Start ``hearth worker`` as a real OS process, and the environment a test-task worker needs.

:func:`worker_env` is the environment of a worker (or an API process) that runs the test task types
(:mod:`hearth.testing.task_types`) on one queue; :class:`WorkerProcess` starts ``python -m hearth worker``
with it and :meth:`WorkerProcess.wait_ready` waits for its "serving" line (printed once the runtime —
database migrated, worker loops started — is up). :meth:`kill9` is a crash; :meth:`stop` a graceful
SIGTERM (then SIGKILL if it does not exit). Use :class:`Workers` to stop every started process on every
exit path of a test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tests.support import MASTER_KEY

READY = re.compile(r"hearth worker (\S+) serving ")


def worker_env(*, queue: str, concurrency: int, database_url: str, redis_prefix: str,
               **extra: Any) -> dict[str, str]:
    """Settings of a process running the test task types on ``queue`` (``extra``: more HEARTH_* values)."""
    env = {"HEARTH_TASK_MODULES": "hearth.testing.task_types:register", "HEARTH_TEST_TASK_QUEUE": queue,
           "HEARTH_TASK_QUEUES": f"{queue}={concurrency}", "HEARTH_DATABASE_URL": database_url,
           "HEARTH_STATE_BACKEND": "redis", "HEARTH_REDIS_PREFIX": redis_prefix, "HEARTH_MASTER_KEY": MASTER_KEY,
           "HEARTH_LOG_LEVEL": "warning"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


class WorkerProcess:
    def __init__(self, cwd: Path, env: dict[str, str], *, queue: str, concurrency: int, name: str) -> None:
        self.name = name
        self.log_path = cwd / f"{name}.log"
        self._log = open(self.log_path, "wb")  # closed by stop() / kill9()
        self.proc = subprocess.Popen([sys.executable, "-m", "hearth", "worker", "-q", queue,
                                      "--concurrency", str(concurrency)], cwd=cwd, env={**os.environ, **env},
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self.started = time.monotonic()
        self.worker_id: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Seconds from process start until the worker said it is serving; sets :attr:`worker_id`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = READY.search(self.output())
            if found:
                self.worker_id = found.group(1)
                return time.monotonic() - self.started
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.output()[-3000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not serving after {timeout} s: {self.output()[-3000:]}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs (no lease handed back, nothing flushed)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful: running tasks finish or are handed back), SIGKILL after ``timeout``; the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


class Workers:
    """The worker processes of one test: ``start`` them, and every one is stopped when the block ends."""

    def __init__(self, cwd: Path, env: dict[str, str], *, queue: str, concurrency: int) -> None:
        self.cwd = cwd
        self.env = env
        self.queue = queue
        self.concurrency = concurrency
        self.started: list[WorkerProcess] = []

    def start(self, name: str | None = None, *, wait: bool = True, **env: Any) -> WorkerProcess:
        proc = WorkerProcess(self.cwd, {**self.env, **{k: str(v) for k, v in env.items()}}, queue=self.queue,
                             concurrency=self.concurrency, name=name or f"worker{len(self.started)}")
        self.started.append(proc)
        if wait:
            proc.wait_ready()
        return proc

    def start_many(self, *names: str) -> list[WorkerProcess]:
        """Start one process per name at once, then wait until every one is serving."""
        procs = [self.start(name, wait=False) for name in names]
        for proc in procs:
            proc.wait_ready()
        return procs

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            proc.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()
