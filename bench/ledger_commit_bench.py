"""What making a budget reservation durable costs: ``BudgetLedger.reserve`` latency and group commit.

Runs the real ledger writer against a fresh SQLite file (WAL, synchronous=NORMAL — Hearth's
settings) and, if reachable, a fresh PostgreSQL database on 127.0.0.1; sequential reservations
(concurrency 1: the latency a single call waits) and bursts of concurrent ones (how many share one
transaction). Usage: ``python bench/ledger_commit_bench.py [--n 2000] [--pg postgresql://...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid

from hearth.gateway.budget_ledger import BudgetLedger, Charge
from hearth.state.memory import MemoryState
from hearth.store.db import create_engine, migrate

KEY = "bench|caller|caller|d20261201"


def _far() -> float:
    """A reservation window no reservation here comes near (the bench measures the commit alone)."""
    return time.monotonic() + 60


async def measure(url: str, n: int, concurrency: tuple[int, ...]) -> dict[str, object]:
    engine = create_engine(url)
    await migrate(engine)
    ledger = BudgetLedger(engine, MemoryState())
    try:
        for i in range(50):  # warm the pool and the statement cache
            await ledger.reserve(f"warm{i}", (Charge("bench", KEY, 1),), deadline=_far())
        lat = []
        for i in range(n):
            t = time.perf_counter()
            await ledger.reserve(f"c1-{i}", (Charge("bench", KEY, 1),), deadline=_far())
            lat.append((time.perf_counter() - t) * 1000)
        out: dict[str, object] = {"c1_p50_ms": round(statistics.median(lat), 3),
                                  "c1_p99_ms": round(sorted(lat)[int(0.99 * len(lat))], 3)}
        for c in concurrency:
            before = (ledger.reservation_commits, ledger.reservations_committed)
            t = time.perf_counter()
            for r in range(max(1, n // c)):
                await asyncio.gather(*(ledger.reserve(f"c{c}-{r}-{j}", (Charge("bench", KEY, 1),), deadline=_far())
                                       for j in range(c)))
            elapsed = time.perf_counter() - t
            commits = ledger.reservation_commits - before[0]
            done = ledger.reservations_committed - before[1]
            out[f"c{c}_per_s"] = round(done / elapsed)
            out[f"c{c}_calls_per_commit"] = round(done / max(1, commits), 1)
        return out
    finally:
        await ledger.stop()
        await engine.dispose()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("sqlite    ", await measure(f"sqlite+aiosqlite:///{tmp}/ledger.db", args.n, (16, 64)))
    try:
        import asyncpg

        name = f"hearth_bench_{uuid.uuid4().hex[:8]}"
        admin = await asyncpg.connect(args.pg)
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            base = args.pg.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
            print("postgresql", await measure(f"{base}/{name}", args.n, (16, 64)))
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()
    except OSError as exc:
        print("postgresql not reachable:", exc)


if __name__ == "__main__":
    asyncio.run(main())
