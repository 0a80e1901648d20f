"""A process's SQLite write transactions queue in Python, never inside SQLite's busy handler.

SQLite's busy handler makes a writer that finds the file locked sleep (1, 2, 5, 10, 15 ms…) and
retry; with a busy timeout of zero it fails at once with "database is locked" instead, which makes
the contention visible: through :func:`write_transaction` concurrent writers never meet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import create_engine, migrate, write_transaction
from hearth.store.rows_insert import insert_rows
from hearth.store.tables import budget_ledger


@pytest.fixture
async def impatient_sqlite(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated SQLite database whose connections give up at once on a locked file."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/lane.db")
    await migrate(engine)

    @event.listens_for(engine.sync_engine, "connect")
    def _no_patience(dbapi_conn: Any, _: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=0")
        cur.close()

    await engine.dispose()  # connections made from now on carry the pragma
    yield engine
    await engine.dispose()


def _row(i: int) -> dict[str, Any]:
    return {"call_id": f"call-{i}", "budget": "b", "counter_key": "k", "kind": "reserve", "calls": 1,
            "amount": i, "refund": 0, "overrun": 0, "created_at": datetime.now(UTC)}


async def _writers(engine: AsyncEngine, begin: Any, n: int = 12) -> list[BaseException | None]:
    async def one(i: int) -> None:
        async with begin(engine) as conn:
            await insert_rows(conn, budget_ledger, [_row(i)])
            await asyncio.sleep(0.01)  # hold the write lock while the others try

    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    return [r if isinstance(r, BaseException) else None for r in results]


async def test_concurrent_writers_outside_the_lane_meet_a_locked_database(impatient_sqlite: AsyncEngine) -> None:
    outcomes = await _writers(impatient_sqlite, lambda e: e.begin())
    assert any(isinstance(o, OperationalError) and "locked" in str(o) for o in outcomes)


async def test_writers_in_the_lane_never_meet_inside_sqlite(impatient_sqlite: AsyncEngine) -> None:
    outcomes = await _writers(impatient_sqlite, write_transaction)
    assert outcomes == [None] * 12
    async with impatient_sqlite.connect() as conn:
        count = (await conn.exec_driver_sql("SELECT count(*) FROM budget_ledger")).scalar()
    assert count == 12


async def test_postgresql_writers_are_not_queued(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        await migrate(engine)
        inside = 0
        most = 0

        async def one(i: int) -> None:
            nonlocal inside, most
            async with write_transaction(engine) as conn:
                inside += 1
                most = max(most, inside)
                await insert_rows(conn, budget_ledger, [_row(i)])
                await asyncio.sleep(0.05)
                inside -= 1

        await asyncio.gather(*(one(i) for i in range(4)))
        assert most > 1  # row locks: PostgreSQL takes concurrent writers itself
    finally:
        await engine.dispose()
