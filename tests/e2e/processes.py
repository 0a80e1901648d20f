"""Start ``hearth serve`` as a real OS process and wait until it is ready."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from hearth.testing.server_thread import free_port


class HearthProcess:
    def __init__(self, cwd: Path, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "wb")
        full_env = {**os.environ, **env, "HEARTH_PORT": str(self.port), "HEARTH_HOST": "127.0.0.1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "hearth", "serve"], cwd=cwd, env=full_env,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self.started = time.monotonic()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 20.0) -> float:
        """Seconds from process start until ``/readyz`` said 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hearth exited with {self.proc.returncode}: {self.output()[-2000:]}")
            try:
                if httpx.get(self.base_url + "/readyz", timeout=1).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"hearth not ready: {self.output()[-2000:]}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs (nothing flushed, no lease released)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def start(cwd: Path, env: dict[str, Any], name: str = "hearth") -> HearthProcess:
    proc = HearthProcess(cwd, {k: str(v) for k, v in env.items()}, cwd / f"{name}.log")
    try:
        proc.wait_ready()
    except BaseException:
        proc.stop()
        raise
    return proc
