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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hearth_process import hearth_env, start_hearth
from scheduler_bench import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def one_start(src: Path | None, config: Path) -> tuple[float, float, float]:
    """(seconds to ready, CPU seconds at ready, RSS MiB 1 s later) of one ``hearth serve``."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"HEARTH_CONFIG": str(config), "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/h.db"}
        if src is not None:
            settings["PYTHONPATH"] = str(src)
        subprocess.run([sys.executable, "-m", "hearth", "migrate"], env=hearth_env(settings), capture_output=True,
                       check=True, timeout=120)
        started = time.perf_counter()
        proc, _base = start_hearth(Path(tmp), settings, poll_s=0.005)
        try:
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
