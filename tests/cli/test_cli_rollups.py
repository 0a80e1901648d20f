"""``hearth rollups rebuild``: recomputes the rollups from the raw request logs and says what it did; a bad
``--since`` exits 2 (the command runs in this process, on a SQLite file)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from hearth.store.db import create_engine, migrate
from hearth.store.tables import request_logs, request_rollups_hour, request_rollups_minute
from tests.support import MASTER_KEY, hearth_in_process

T0 = datetime(2026, 3, 1, 10, 0, 5, tzinfo=UTC)


async def _seed_logs(url: str) -> None:
    engine = create_engine(url)
    await migrate(engine)
    base = {"route": "chat", "model": "m", "endpoint": "e", "stream": False, "attempts": 1, "prompt_tokens": 2,
            "completion_tokens": 3, "usage_estimated": False, "cost": 0.5, "latency_ms": 20.0, "status": 200,
            "fallback_used": False, "caller": "c"}
    async with engine.begin() as conn:
        await conn.execute(request_logs.insert(), [
            {**base, "request_id": f"r{i}", "created_at": T0 + timedelta(minutes=i)} for i in range(5)])
    await engine.dispose()


async def _rollup_calls(url: str) -> tuple[list[tuple[int, int]], list[int]]:
    """(bucket, calls) of the minute rows, calls of the hour rows."""
    engine = create_engine(url)
    async with engine.connect() as conn:
        minutes = [(int(b), int(c)) for b, c in await conn.execute(
            select(request_rollups_minute.c.bucket, request_rollups_minute.c.calls).order_by("bucket"))]
        hours = [int(c) for (c,) in await conn.execute(select(request_rollups_hour.c.calls))]
    await engine.dispose()
    return minutes, hours


def test_rebuild_fills_the_rollups_from_the_request_logs(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/h.db"
    asyncio.run(_seed_logs(url))  # rows inserted directly: no writer, so no rollups yet
    env = {"HEARTH_DATABASE_URL": url, "HEARTH_MASTER_KEY": MASTER_KEY}
    out = hearth_in_process(["rollups", "rebuild", "--since", "2026-12-31T00:00:00"], cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert asyncio.run(_rollup_calls(url)) == ([], [])
    out = hearth_in_process(["rollups", "rebuild"], cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert "from 5 request logs: 5 minute rows, 1 hour rows, 1 day rows" in out.stdout
    minute = int(T0.timestamp()) // 60 * 60
    assert asyncio.run(_rollup_calls(url)) == ([(minute + 60 * i, 1) for i in range(5)], [5])
    bad = hearth_in_process(["rollups", "rebuild", "--since", "yesterday"], cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "not an ISO-8601 time" in bad.stderr
