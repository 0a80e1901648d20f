"""``hearth serve`` as a child process for the benchmarks: a clean ``HEARTH_*`` environment plus the
settings a bench gives, its log in the bench's temporary directory, and the base URL once ``/readyz``
answers 200 (or the log's tail if it never does)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from hearth.testing.server_thread import free_port


def hearth_env(settings: dict[str, str]) -> dict[str, str]:
    """This environment without its ``HEARTH_*`` variables, plus the bench defaults (master key, host, log level)
    and ``settings`` (``HEARTH_*`` variables, or any other the child needs, e.g. ``PYTHONPATH``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update({"HEARTH_MASTER_KEY": "00" * 32, "HEARTH_HOST": "127.0.0.1", "HEARTH_LOG_LEVEL": "warning",
                **settings})
    return env


def start_hearth(tmp: Path, settings: dict[str, str], *, ready_s: float = 60.0,
                 poll_s: float = 0.1) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``hearth serve`` in ``tmp`` on a free loopback port with :func:`hearth_env` of ``settings`` and return
    (process, base URL) once ``/readyz`` answers 200, asked every ``poll_s``."""
    port = free_port()
    env = {**hearth_env(settings), "HEARTH_PORT": str(port)}
    log_path = tmp / "hearth.log"
    with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "hearth", "serve"], env=env, cwd=tmp, stdout=log,
                                stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:  # urllib, not httpx: an httpx call builds a TLS context (~30 ms), too coarse for start-up timing
            with urllib.request.urlopen(base + "/readyz", timeout=1) as answer:
                if answer.status == 200:
                    return proc, base
        except OSError:  # refused, reset, or a non-200 answer (HTTPError)
            pass
        time.sleep(poll_s)
    proc.kill()
    raise SystemExit("hearth serve did not become ready:\n" + log_path.read_text()[-3000:])
