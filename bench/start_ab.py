"""Start-up A/B: ``hearth serve`` from exec to ``/readyz`` 200, this tree against another tree's ``src``.

Each run migrates a fresh SQLite database first (``hearth migrate``), so both sides measure the same start on an
existing database; the two sides alternate (ABBA…), and the medians are reported: ready time, the process's CPU
time at ready (user + system, from /proc), and its resident memory one second after ready. Both sides run on this
``.venv``'s interpreter; the other side's ``src`` goes first on ``PYTHONPATH`` (warm its bytecode cache first:
``PYTHONPATH=OTHER/src python -c 'import hearth.app'``, or it pays compilation).

    python bench/start_ab.py --other-src /tmp/before/src --runs 8

Local only: Hearth listens on 127.0.0.1 with the demo config (its upstreams are never called).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from scheduler_bench import cpu_seconds, free_port

ROOT = Path(__file__).resolve().parents[1]


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def one_start(src: Path | None, config: Path) -> tuple[float, float, float]:
    """(seconds to ready, CPU seconds at ready, RSS MiB 1 s later) of one ``hearth serve``."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
        env.update(HEARTH_CONFIG=str(config), HEARTH_HOST="127.0.0.1", HEARTH_PORT=str(port),
                   HEARTH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/h.db", HEARTH_MASTER_KEY=secrets.token_hex(32),
                   HEARTH_LOG_LEVEL="warning")
        if src is not None:
            env["PYTHONPATH"] = str(src)
        subprocess.run([sys.executable, "-m", "hearth", "migrate"], env=env, capture_output=True, check=True,
                       timeout=120)
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "hearth", "serve"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"hearth serve exited with {proc.returncode}")
                if time.perf_counter() - started > 60:
                    raise RuntimeError("hearth serve not ready within 60 s")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
                        if answer.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    time.sleep(0.005)
            ready = time.perf_counter() - started
            cpu = cpu_seconds(proc.pid)
            time.sleep(1.0)
            return ready, cpu, _rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other-src", type=Path, required=True, help="the other tree's src/ directory")
    parser.add_argument("--runs", type=int, default=8, help="starts per side (default 8)")
    parser.add_argument("--config", type=Path, default=ROOT / "examples" / "hearth.demo.yaml")
    args = parser.parse_args()
    sides: dict[str, Path | None] = {"other": args.other_src.resolve(), "this": None}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    for i in range(args.runs):
        for name in (list(sides) if i % 2 else list(sides)[::-1]):
            results[name].append(one_start(sides[name], args.config))
    for name, runs in results.items():
        ready, cpu, rss = (statistics.median(r[k] for r in runs) for k in range(3))
        print(f"{name:5}  ready {ready:.3f} s  CPU {cpu:.3f} s  RSS {rss:.1f} MiB   "
              f"(ready: {', '.join(f'{r[0]:.2f}' for r in runs)})")


if __name__ == "__main__":
    main()
