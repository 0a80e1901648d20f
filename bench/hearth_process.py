"""``hearth serve`` as a child process for the benchmarks: a clean ``HEARTH_*`` environment plus the
settings a bench gives, its log in the bench's temporary directory, and the base URL once ``/readyz``
answers 200 (or the log's tail if it never does)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from hearth.testing.server_thread import free_port


def start_hearth(tmp: Path, settings: dict[str, str], *, ready_s: float = 60.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``hearth serve`` in ``tmp`` on a free loopback port with ``settings`` (``HEARTH_*`` variables;
    the master key, host, port and log level have bench defaults) and return (process, base URL)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update({"HEARTH_MASTER_KEY": "00" * 32, "HEARTH_HOST": "127.0.0.1", "HEARTH_LOG_LEVEL": "warning",
                **settings, "HEARTH_PORT": str(port)})
    log_path = tmp / "hearth.log"
    with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "hearth", "serve"], env=env, cwd=tmp, stdout=log,
                                stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("hearth serve did not become ready:\n" + log_path.read_text()[-3000:])
