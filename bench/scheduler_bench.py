"""What the leaderless scheduler costs a Hearth process at idle, with many active schedules (issue 11).

Creates a fresh PostgreSQL database, migrates it, inserts ``--schedules`` active schedules whose next
occurrence is weeks away (so nothing fires: this measures the scheduler's standing cost), then starts
``hearth serve`` on it twice in turn — the scheduler on, then off (``HEARTH_SCHEDULER_ENABLED=false``) —
and reads the process's CPU time (``/proc/<pid>/stat``, all threads) over ``--seconds`` of idling after a
settle. The difference is the scheduler's cost, in % of one core.

Usage: ``python bench/scheduler_bench.py [--schedules 10000] [--seconds 30] [--pg postgresql://...]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import asyncpg

from hearth.ids import new_id
from hearth.store.db import create_engine, migrate
from hearth.store.tables import schedules

REGISTRY = """
providers: [{name: sim, kind: simulated}]
endpoints: [{name: sim-1, provider: sim, upstream_model: simulated-chat}]
models: [{name: chat, endpoints: [sim-1]}]
callers: [{name: bench, key: bench-key-0123456789}]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def prepare(url: str, count: int) -> None:
    engine = create_engine(url)
    try:
        await migrate(engine)
        now = time.time()
        far = now + 30 * 86400  # next occurrence weeks away: the scheduler finds nothing due
        rows = [{"id": "sch_" + new_id(), "name": f"s{i:06d}", "caller": "bench", "cron": "0 3 1 * *",
                 "time_zone": "UTC", "target": {"task_type": "summarize_async", "payload": {"text": "x"}},
                 "start_at": None, "end_at": None, "jitter_s": 0.0, "misfire_policy": "run_once",
                 "catchup_window_s": 3600.0, "overlap_policy": "skip", "paused": False, "planned_through": now,
                 "next_at": far + i, "created_at": now, "updated_at": now} for i in range(count)]
        async with engine.begin() as conn:
            for start in range(0, len(rows), 1000):
                await conn.execute(schedules.insert(), rows[start:start + 1000])
    finally:
        await engine.dispose()


def idle_cpu(url: str, config: Path, *, scheduler: bool, seconds: float, cpus: str) -> float:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update({"HEARTH_CONFIG": str(config), "HEARTH_HOST": "127.0.0.1", "HEARTH_PORT": str(port),
                "HEARTH_DATABASE_URL": url, "HEARTH_MASTER_KEY": secrets.token_hex(32),
                "HEARTH_SCHEDULER_ENABLED": "true" if scheduler else "false", "HEARTH_LOG_LEVEL": "warning"})
    argv = ["taskset", "-c", cpus, sys.executable, "-m", "hearth", "serve"]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"hearth serve did not become ready: {log.read()[-2000:]!r}")
                time.sleep(0.05)
            time.sleep(5)  # settle: start-up work done, writers idle
            before, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(seconds)
            return (cpu_seconds(proc.pid) - before) / (time.monotonic() - t0) * 100
        finally:
            proc.terminate()
            proc.wait(30)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--cpus", default="0", help="CPU list for the Hearth process")
    args = ap.parse_args()
    name = f"hearth_sched_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.pg)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = args.pg.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1) + f"/{name}"
    try:
        await prepare(url, args.schedules)
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "hearth.yaml"
            config.write_text(REGISTRY)
            on = await asyncio.to_thread(idle_cpu, url, config, scheduler=True, seconds=args.seconds, cpus=args.cpus)
            off = await asyncio.to_thread(idle_cpu, url, config, scheduler=False, seconds=args.seconds,
                                          cpus=args.cpus)
        print(f"schedules: {args.schedules}, idle {args.seconds:g} s, PostgreSQL")
        print(f"  scheduler on : {on:.2f} % of one core")
        print(f"  scheduler off: {off:.2f} % of one core")
        print(f"  the scheduler: {on - off:+.2f} % of one core (target ≤ 5 %)")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
