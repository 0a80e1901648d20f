"""The request-log writer: bounded fields, bad rows isolated in dead_rows, rows kept through an outage.

Real SQLite and PostgreSQL. Outages are real too: PostgreSQL behind a TCP proxy the test cuts
(connection refused, open connections reset), SQLite with another connection holding the write lock.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from hearth.observability.request_id import MAX_REQUEST_ID
from hearth.observability.request_log import RequestLogWriter, bound_record
from hearth.store.db import create_engine, migrate
from hearth.store.tables import dead_rows, request_logs
from tests.store.tcp_proxy import TcpProxy
from tests.support import PG_ADMIN_DSN
from tests.support import request_log_record as record


async def logged(engine: AsyncEngine) -> dict[str, dict[str, Any]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(request_logs).order_by(request_logs.c.id))).mappings().all()
    return {r["request_id"]: dict(r) for r in rows}


async def dead(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(select(dead_rows))).mappings()]


def test_request_id_limit_is_the_columns() -> None:
    assert request_logs.c.request_id.type.length == MAX_REQUEST_ID  # type: ignore[attr-defined]


def test_bound_record_fits_every_field_to_its_column() -> None:
    r = bound_record(record(1, request_id="r" * 100, tenant="t" * 1000, end_user="a\x00b", model="m\ud800",
                            scene="场景" * 100, status=2**40, prompt_tokens=-(2**40), effective_max_tokens=2**31,
                            cost=math.nan, latency_ms=math.inf, ttft_ms=math.nan, estimated_cost=-math.inf,
                            attempted_models=[f"m{i}" for i in range(100)]))
    assert r.request_id == "r" * 64 and r.tenant == "t" * 256 and r.end_user == "a\ufffdb" and r.model == "m?"
    assert r.scene == ("场景" * 64)[:128]  # characters, as PostgreSQL's varchar counts them
    assert (r.status, r.prompt_tokens, r.effective_max_tokens) == (2**31 - 1, -(2**31), 2**31 - 1)
    assert r.cost == 0.0 and r.ttft_ms is None  # NaN: NOT NULL → 0.0, nullable → NULL
    assert math.isfinite(r.latency_ms) and r.latency_ms > 1e308 and r.estimated_cost is not None
    assert math.isfinite(r.estimated_cost) and r.estimated_cost < -1e308
    assert len(r.attempted_models or []) == 32
    usual = record(2, tenant="华东分公司")
    assert bound_record(replace(usual)) == usual  # a record that fits is left as it is
    odd = record(3, status="x", tenant="t" * 300)  # a wrong type is left for the database to refuse
    assert bound_record(odd).status == "x"


async def test_a_batch_with_one_row_of_each_bad_kind_writes_every_other_row(database_url: str) -> None:
    engine = create_engine(database_url)
    await migrate(engine)
    writer = RequestLogWriter(engine, batch=1000)
    try:
        for i in range(20):
            writer.submit(record(i))
        writer.submit(record(20, request_id="x" * 65))  # reached the writer without the middleware
        writer.submit(record(21, effective_max_tokens=2**31, completion_tokens=2**63))  # beyond int32 / int64
        writer.submit(record(22, tenant="t" * 300, end_user="u" * 300, model="m" * 200))
        writer.submit(record(23, end_user="nul\x00here", cost=math.nan))
        writer._queue.append(record(24, route=None))  # NOT NULL: refused even bounded (queued past submit)
        for i in range(25, 30):
            writer.submit(record(i))
        assert await writer.flush() is True
        stats = writer.stats()
        assert stats == {"written": 29, "dropped": 0, "dead": 1, "lost": 0, "pending": 0, "failed_batches": 0,
                         "last_error": "IntegrityError"}
        rows = await logged(engine)
        assert len(rows) == 29 and "req-24" not in rows
        assert rows["x" * 64]["status"] == 200
        assert rows["req-21"]["effective_max_tokens"] == 2**31 - 1 and rows["req-21"]["completion_tokens"] == 2**31 - 1
        assert len(rows["req-22"]["tenant"]) == 256 and len(rows["req-22"]["model"]) == 128
        assert rows["req-23"]["end_user"] == "nul\ufffdhere" and rows["req-23"]["cost"] == 0.0
        (letter,) = await dead(engine)
        assert letter["writer"] == "request_log" and letter["row_key"] == "req-24"
        assert letter["error"].startswith("IntegrityError: ") and '"route": null' in letter["payload"]
    finally:
        await writer.stop()
        await engine.dispose()


@asynccontextmanager
async def outage(database_url: str) -> AsyncIterator[tuple[AsyncEngine, Any]]:
    """An engine for the writer, and ``cut(down: bool)`` that takes its database away and back."""
    if database_url.startswith("postgresql"):
        proxy = await TcpProxy(TcpProxy.target_port_of(PG_ADMIN_DSN)).up()
        name = database_url.rsplit("/", 1)[1]
        engine = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{proxy.port}/{name}")

        async def cut(down: bool) -> None:
            await (proxy.down() if down else proxy.up())

        try:
            yield engine, cut
        finally:
            await engine.dispose()
            await proxy.down()
        return
    path = database_url.split("///", 1)[1]
    engine = create_async_engine(database_url, connect_args={"timeout": 0.3})  # a short busy timeout
    holder = sqlite3.connect(path, isolation_level=None)

    async def cut_sqlite(down: bool) -> None:
        holder.execute("BEGIN EXCLUSIVE" if down else "ROLLBACK")

    try:
        yield engine, cut_sqlite
    finally:
        holder.close()
        await engine.dispose()


async def test_rows_are_kept_through_an_outage_and_written_once_the_database_is_back(database_url: str) -> None:
    setup = create_engine(database_url)
    await migrate(setup)
    async with outage(database_url) as (engine, cut):
        writer = RequestLogWriter(engine, flush_s=0.05)
        writer.start()
        try:
            writer.submit(record(0))
            for _ in range(100):
                if writer.written:
                    break
                await asyncio.sleep(0.02)
            await cut(True)
            for i in range(1, 11):
                writer.submit(record(i))
            for _ in range(200):
                if writer.failed_batches >= 2:  # retried (with a backoff) and failed again
                    break
                await asyncio.sleep(0.02)
            stats = writer.stats()
            assert stats["failed_batches"] >= 2 and stats["pending"] == 10 and stats["written"] == 1
            assert stats["dropped"] == 0 and stats["dead"] == 0 and stats["last_error"] in {
                "ConnectionRefusedError", "OperationalError", "DBAPIError", "InterfaceError"}
            await cut(False)
            for _ in range(400):
                if writer.written == 11:
                    break
                await asyncio.sleep(0.02)
            assert writer.stats()["written"] == 11 and writer.pending == 0
        finally:
            await writer.stop()
    rows = await logged(setup)
    assert list(rows) == [f"req-{i}" for i in range(11)]  # each once, in order
    assert await dead(setup) == []
    await setup.dispose()


async def test_an_outage_that_outlasts_the_queue_drops_the_oldest_rows(tmp_path: Any) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/h.db"
    setup = create_engine(url)
    await migrate(setup)
    async with outage(url) as (engine, cut):
        writer = RequestLogWriter(engine, max_queue=12, batch=100)
        for i in range(10):
            writer.submit(record(i))
        await cut(True)
        flushing = asyncio.create_task(writer.flush())
        await asyncio.sleep(0.1)  # the 10 rows are in flight, waiting for the lock (0.3 s)
        for i in range(10, 15):
            writer.submit(record(i))
        assert await flushing is False
        assert (writer.pending, writer.dropped, writer.failed_batches) == (12, 3, 1)
        await cut(False)
        assert await writer.flush() is True
    assert list(await logged(setup)) == [f"req-{i}" for i in range(3, 15)]
    await setup.dispose()
