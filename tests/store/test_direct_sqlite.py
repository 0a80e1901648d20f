"""DirectSqliteWriter stores exactly what SQLAlchemy stores, in one transaction that is all or nothing."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import create_engine, write_lane, write_lane_free
from hearth.store.direct_sqlite import DirectSqliteWriter, _execute_and_commit
from hearth.store.rows_insert import driver_statement
from hearth.store.tables import budget_ledger


def _rows(n: int, *, start: int = 0) -> list[dict[str, Any]]:
    now = datetime(2026, 12, 2, 8, 0, 0, 250, tzinfo=UTC)
    return [{"call_id": f"group-{i}", "budget": "daily", "counter_key": f"daily|caller:a|{i}", "kind": "reserve",
             "calls": 1 + i, "amount": 10 * i, "refund": 0, "overrun": 0, "created_at": now + timedelta(seconds=i)}
            for i in range(start, start + n)]


@pytest.fixture
def sqlite_url(tmp_path: Path, migrated_templates: Any) -> str:
    """A migrated SQLite file: the only kind of database the direct writer serves (see the last test)."""
    migrated_templates.sqlite_copy(tmp_path / "hearth.db")
    return f"sqlite+aiosqlite:///{tmp_path}/hearth.db"


@pytest.fixture
async def direct(sqlite_url: str) -> AsyncIterator[tuple[AsyncEngine, DirectSqliteWriter]]:
    """An engine and a direct writer on the same migrated SQLite file (both closed afterwards)."""
    engine = create_engine(sqlite_url)
    writer = DirectSqliteWriter.for_engine(engine)
    assert writer is not None
    try:
        yield engine, writer
    finally:
        await writer.close()
        await engine.dispose()


async def _read(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(budget_ledger).order_by(budget_ledger.c.id))).mappings().all()
    return [{k: v for k, v in r.items() if k != "id"} for r in rows]


async def test_rows_read_back_as_sqlalchemy_wrote_them(direct: tuple[AsyncEngine, DirectSqliteWriter]) -> None:
    engine, writer = direct
    await writer.insert(budget_ledger, _rows(3))
    async with engine.begin() as conn:
        await conn.execute(budget_ledger.insert(), _rows(2, start=3))
    await writer.insert(budget_ledger, _rows(1, start=5))  # after another connection wrote
    got = await _read(engine)
    expected = _rows(6)
    assert [{**r, "created_at": r["created_at"].replace(tzinfo=UTC)} for r in got] == expected


async def test_a_refused_batch_writes_nothing_and_the_next_one_commits(
        direct: tuple[AsyncEngine, DirectSqliteWriter]) -> None:
    engine, writer = direct
    bad = _rows(3)
    bad[2]["amount"] = None  # NOT NULL: the driver refuses the third row of the batch
    with pytest.raises(sqlite3.IntegrityError):
        await writer.insert(budget_ledger, bad)
    await writer.insert(budget_ledger, _rows(2, start=10))
    async with engine.connect() as conn:
        ids = (await conn.execute(select(budget_ledger.c.call_id).order_by(budget_ledger.c.id))).scalars().all()
    assert ids == ["group-10", "group-11"]


async def test_rows_without_every_column_are_refused_before_the_database(
        direct: tuple[AsyncEngine, DirectSqliteWriter]) -> None:
    engine, writer = direct
    row = _rows(1)[0]
    del row["overrun"]
    with pytest.raises(ValueError, match="budget_ledger"):
        await writer.insert(budget_ledger, [row])
    async with engine.connect() as conn:
        count = await conn.scalar(select(func.count()).select_from(budget_ledger))
    assert count == 0


async def test_a_closed_writer_starts_afresh(direct: tuple[AsyncEngine, DirectSqliteWriter]) -> None:
    engine, writer = direct
    await writer.insert(budget_ledger, _rows(1))
    await writer.close()
    await writer.insert(budget_ledger, _rows(1, start=1))
    assert len(await _read(engine)) == 2


def test_only_plain_sqlite_files_get_a_direct_writer(tmp_path: Path) -> None:
    engines = {
        "file": create_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}"),
        "memory": create_engine("sqlite+aiosqlite:///:memory:"),
        "postgres": create_engine("postgresql+asyncpg://u@127.0.0.1:5432/x"),
    }
    got = {name: DirectSqliteWriter.for_engine(e) is not None for name, e in engines.items()}
    assert got == {"file": True, "memory": False, "postgres": False}


# ---- try_now: the transaction on the event loop's thread, only when the write lock is free at once --------

def _statement(writer: DirectSqliteWriter, rows: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    return [driver_statement(budget_ledger, writer.dialect, rows)]


async def test_try_now_commits_on_the_calling_thread(direct: tuple[AsyncEngine, DirectSqliteWriter]) -> None:
    engine, writer = direct
    assert writer.try_now(_statement(writer, _rows(2))) is True
    assert writer._executor is None  # no thread was started for it
    assert [r["call_id"] for r in await _read(engine)] == ["group-0", "group-1"]
    assert (writer.now_transactions, writer.now_busy) == (1, 0)


async def test_try_now_writes_nothing_and_says_so_while_another_connection_holds_the_lock(
        direct: tuple[AsyncEngine, DirectSqliteWriter], sqlite_url: str) -> None:
    engine, writer = direct
    other = sqlite3.connect(sqlite_url.split("///", 1)[1], isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        assert writer.try_now(_statement(writer, _rows(1))) is False  # at once: no busy wait on the loop
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert writer.now_busy == 1
    assert await _read(engine) == []
    assert writer.try_now(_statement(writer, _rows(1))) is True  # the same connection works once the lock is free


async def test_try_now_rolls_back_a_refused_batch(direct: tuple[AsyncEngine, DirectSqliteWriter]) -> None:
    engine, writer = direct
    bad = _rows(3)
    bad[2]["amount"] = None
    with pytest.raises(sqlite3.IntegrityError):
        writer.try_now(_statement(writer, bad))
    assert await _read(engine) == []
    assert writer.try_now(_statement(writer, _rows(1, start=7))) is True
    assert [r["call_id"] for r in await _read(engine)] == ["group-7"]


def _wal_size(path: Path) -> int:
    return os.path.getsize(f"{path}-wal")


async def _wal_bytes_after_writes(path: Path, batches: int) -> int:
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    writer = DirectSqliteWriter.for_engine(engine)
    assert writer is not None
    try:
        for i in range(batches):
            assert writer.try_now(_statement(writer, _rows(400, start=400 * i)))
            if writer._checkpointing is not None:
                await writer._checkpointing
        return _wal_size(path)
    finally:
        await writer.close()
        await engine.dispose()


async def test_rows_written_on_the_loop_are_checkpointed_on_the_writer_thread(
        tmp_path: Path, migrated_templates: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's connection never checkpoints (an fsync on the event loop); after enough rows the writer's
    thread does, so the WAL is reused from its start instead of growing with every row ever written."""
    migrated_templates.sqlite_copy(tmp_path / "checkpointed.db")
    migrated_templates.sqlite_copy(tmp_path / "never.db")
    checkpointed = await _wal_bytes_after_writes(tmp_path / "checkpointed.db", 12)
    monkeypatch.setattr("hearth.store.direct_sqlite._CHECKPOINT_ROWS", 10**9)
    never = await _wal_bytes_after_writes(tmp_path / "never.db", 12)
    assert checkpointed < never / 2


async def test_the_write_lane_is_free_only_when_no_transaction_of_this_process_holds_it(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url)
    try:
        assert write_lane_free(engine)
        async with write_lane(engine):
            assert not write_lane_free(engine)
        assert write_lane_free(engine)
    finally:
        await engine.dispose()
    assert write_lane_free(create_engine("postgresql+asyncpg://u@127.0.0.1:5432/x"))


def test_a_busy_commit_on_a_connection_that_never_waits_writes_nothing(tmp_path: Path) -> None:
    """SQLite keeps a transaction open when COMMIT finds the file busy; the never-waiting path rolls it back and
    reports "nothing written" (its caller then writes through the write lane). Shown in rollback-journal mode,
    where a reader's shared lock is what makes COMMIT busy."""
    path = str(tmp_path / "journal.db")
    writer = sqlite3.connect(path, isolation_level=None, timeout=0)
    reader = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        writer.execute("CREATE TABLE t (v INTEGER)")
        writer.execute("BEGIN IMMEDIATE")
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (0,)  # holds a shared lock
        dropped: list[bool] = []
        committed = _execute_and_commit(writer, [("INSERT INTO t (v) VALUES (?)", [(1,), (2,)])],
                                        lambda: dropped.append(True), give_up_when_busy=True)
        reader.execute("COMMIT")
        assert (committed, dropped, writer.in_transaction) == (False, [], False)
        assert writer.execute("SELECT count(*) FROM t").fetchone() == (0,)
    finally:
        writer.close()
        reader.close()


async def test_run_commits_on_the_loop_when_it_can_and_in_the_write_lane_when_a_transaction_holds_it(
        direct: tuple[AsyncEngine, DirectSqliteWriter]) -> None:
    engine, writer = direct
    await writer.run(_statement(writer, _rows(2)))
    assert (writer.now_transactions, writer._executor) == (1, None)  # small, lane free: no thread at all
    lane = write_lane(engine)
    await lane.__aenter__()  # another transaction of this process holds the lane
    pending = asyncio.ensure_future(writer.run(_statement(writer, _rows(1, start=2))))
    await asyncio.sleep(0.05)
    assert not pending.done()  # it waits for the lane instead of meeting that transaction inside SQLite
    await lane.__aexit__(None, None, None)
    await pending
    assert writer.now_transactions == 1 and writer._executor is not None  # written on the writer's thread
    await writer.run(_statement(writer, _rows(501, start=3)))  # too large for the loop
    assert writer.now_transactions == 1
    assert len(await _read(engine)) == 504
