"""insert_isolating: bisect a refused batch, dead-letter the bad rows, hand everything back on an outage.

Real SQLite and PostgreSQL, a table whose constraints the test controls, and the errors each driver
really raises for each kind of bad row (they differ: asyncpg refuses an over-long string or an int32
overflow, SQLite stores both; sqlite3 raises a bare OverflowError beyond int64).
"""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    select,
    text,
)
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from hearth.store.batch_insert import insert_isolating
from hearth.store.db import create_engine, migrate
from hearth.store.tables import dead_rows

probe_md = MetaData()
probe = Table(
    "probe_rows", probe_md,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", String(8), nullable=False),
    Column("n", Integer, nullable=True),
    Column("big", BigInteger, nullable=True),
    Column("doc", JSON, nullable=True),
    Column("at", DateTime(timezone=True), nullable=True),
    CheckConstraint("n IS NULL OR n >= 0", name="ck_probe_n"),
)
missing = Table("not_created", MetaData(), Column("id", Integer, primary_key=True))
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def row(i: int, **over: Any) -> dict[str, Any]:
    return {"id": i, "name": f"r{i}", "n": i, "big": i, "doc": {"i": i}, "at": NOW, **over}


@pytest.fixture
async def engine(database_url: str) -> Any:
    engine = create_engine(database_url)
    await migrate(engine)
    async with engine.begin() as conn:
        await conn.run_sync(probe_md.create_all)
    yield engine
    await engine.dispose()


async def ids(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(probe.c.id).order_by(probe.c.id))).scalars())


async def dead(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(select(dead_rows).order_by(dead_rows.c.id))).mappings()]


def is_postgres(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "postgresql"


async def test_a_clean_batch_is_one_insert_and_an_empty_one_nothing(engine: AsyncEngine) -> None:
    outcome = await insert_isolating(engine, probe, [row(i) for i in range(10)], writer="t", row_key="id")
    assert (outcome.written, outcome.dead, outcome.retry, outcome.error) == (10, 0, [], None)
    assert (await insert_isolating(engine, probe, [], writer="t", row_key="id")).written == 0
    assert await ids(engine) == list(range(10))


async def test_refused_rows_of_every_kind_are_dead_lettered_and_the_rest_written(engine: AsyncEngine) -> None:
    bad = {  # refused by both databases
        3: row(3, name=None),  # NOT NULL
        7: row(7, n=-1),  # CHECK
        11: row(11, big=2**64),  # beyond int64: asyncpg DataError / sqlite3 OverflowError (bare)
        13: row(13, name="\ud800"),  # lone surrogate: asyncpg DataError / UnicodeEncodeError (bare)
        17: row(17, doc={"s": {1, 2}}),  # not JSON: StatementError(TypeError) while binding
        19: row(19, name={"a": 1}),  # a dict for a string: asyncpg DataError / sqlite3 ProgrammingError (probe)
    }
    if is_postgres(engine):  # SQLite stores these: its types do not bound length or int32
        bad |= {23: row(23, name="x" * 9), 29: row(29, n=2**31), 31: row(31, name="a\x00b")}
    rows = [bad.get(i) or row(i) for i in range(40)]
    rows.append(row(5, name="dup"))  # a duplicate primary key of a good row (the later one is refused)

    outcome = await insert_isolating(engine, probe, rows, writer="probe", row_key="id")

    assert outcome.written == 40 - len(bad) and outcome.dead == len(bad) + 1
    assert (outcome.lost, outcome.retry) == (0, [])
    assert await ids(engine) == [i for i in range(40) if i not in bad]
    letters = await dead(engine)
    assert sorted(int(d["row_key"]) for d in letters) == sorted([*bad, 5])
    assert {d["writer"] for d in letters} == {"probe"}
    by_key = {d["row_key"]: d for d in letters}
    assert by_key["3"]["error"].startswith("IntegrityError: ") and "null" in by_key["3"]["error"].lower()
    assert all(len(d["error"]) <= 500 and "[SQL:" not in d["error"] for d in letters)
    payload = json.loads(by_key["7"]["payload"])
    assert payload == {"id": 7, "name": "r7", "n": -1, "big": 7, "doc": {"i": 7}, "at": NOW.isoformat()}
    assert json.loads(by_key["11"]["payload"])["big"] == str(2**64)
    assert json.loads(by_key["13"]["payload"])["name"] == "?"
    if is_postgres(engine):
        assert by_key["23"]["error"].startswith("DBAPIError: ") and "too long" in by_key["23"]["error"]
        assert "int32" in by_key["29"]["error"]


async def test_bisection_costs_about_two_log2_n_transactions(engine: AsyncEngine) -> None:
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO probe_rows"):
            statements.append(statement)

    from sqlalchemy import event

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    rows = [row(i) for i in range(512)]
    rows[300] = row(300, name=None)
    outcome = await insert_isolating(engine, probe, rows, writer="probe", row_key="id")
    assert (outcome.written, outcome.dead) == (511, 1)
    assert len(statements) == 1 + 2 * 9  # the batch, then both halves at each of 9 levels


async def test_an_unreachable_database_hands_every_row_back_untouched(engine: AsyncEngine, database_url: str,
                                                                      tmp_path: Path) -> None:
    rows = [row(i) for i in range(5)] + [row(5, name=None)]
    if is_postgres(engine):
        with socket.socket() as s:  # a port nothing listens on: connection refused
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        down = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/x")
    else:  # another connection holds SQLite's write lock: "database is locked"
        path = database_url.split("///", 1)[1]
        down = create_async_engine(database_url, connect_args={"timeout": 0.2})
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
    try:
        outcome = await insert_isolating(down, probe, rows, writer="probe", row_key="id")
    finally:
        await down.dispose()
        if not is_postgres(engine):
            holder.execute("ROLLBACK")
            holder.close()
    assert outcome.unavailable and (outcome.written, outcome.dead) == (0, 0)
    assert all(a is b for a, b in zip(outcome.retry, rows, strict=True))  # the same objects, in order
    assert outcome.error in {"ConnectionRefusedError", "OperationalError"}
    assert await ids(engine) == [] and await dead(engine) == []
    outcome = await insert_isolating(engine, probe, outcome.retry, writer="probe", row_key="id")
    assert (outcome.written, outcome.dead) == (5, 1)


async def test_a_missing_table_is_not_the_rows_fault(engine: AsyncEngine) -> None:
    outcome = await insert_isolating(engine, missing, [{"id": 1}, {"id": 2}], writer="probe", row_key="id")
    assert outcome.unavailable and len(outcome.retry) == 2 and outcome.dead == 0
    assert await dead(engine) == []


async def test_an_outage_in_the_middle_of_a_bisection_keeps_what_is_left(postgres_url: str) -> None:
    """A row that kills its own connection (a trigger terminating the backend) is an outage, not a bad row."""
    engine = create_engine(postgres_url)
    try:
        await migrate(engine)
        async with engine.begin() as conn:
            await conn.run_sync(probe_md.create_all)
            await conn.execute(text(
                "CREATE FUNCTION die() RETURNS trigger AS $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid());"
                " RETURN NEW; END $$ LANGUAGE plpgsql"))
            await conn.execute(text("CREATE TRIGGER die BEFORE INSERT ON probe_rows FOR EACH ROW"
                                    " WHEN (NEW.name = 'die') EXECUTE FUNCTION die()"))
        rows = [row(i) for i in range(16)]
        rows[2] = row(2, name=None)  # refused: the batch is split; the first half goes in, row 2 dead
        rows[12] = row(12, name="die")  # the second half's transaction loses its connection
        outcome = await insert_isolating(engine, probe, rows, writer="probe", row_key="id")
        assert (outcome.written, outcome.dead) == (7, 1)
        assert [r["id"] for r in outcome.retry] == list(range(8, 16))
        assert await ids(engine) == [0, 1, 3, 4, 5, 6, 7]
    finally:
        await engine.dispose()


async def test_a_dead_letter_that_cannot_be_recorded_is_logged_and_counted(
        engine: AsyncEngine, caplog: pytest.LogCaptureFixture) -> None:
    async with engine.begin() as conn:  # dead_rows itself refuses this writer's rows
        if is_postgres(engine):
            await conn.execute(text("ALTER TABLE dead_rows ADD CONSTRAINT ck_no_doomed CHECK (writer <> 'doomed')"))
        else:
            await conn.execute(text("CREATE TRIGGER no_doomed BEFORE INSERT ON dead_rows WHEN NEW.writer = 'doomed'"
                                    " BEGIN SELECT RAISE(ABORT, 'doomed'); END"))
    rows = [row(1), row(2, name=None), row(3)]
    with caplog.at_level(logging.ERROR, logger="hearth.batch_insert"):
        outcome = await insert_isolating(engine, probe, rows, writer="doomed", row_key="id")
    assert (outcome.written, outcome.dead, outcome.lost, outcome.retry) == (2, 0, 1, [])
    lines = [r for r in caplog.records if r.getMessage() == "dead_row_not_recorded"]
    assert len(lines) == 1 and lines[0].hearth_fields["row_key"] == "2"  # type: ignore[attr-defined]
    assert lines[0].hearth_fields["error"] == "IntegrityError"  # type: ignore[attr-defined]
    assert await ids(engine) == [1, 3]


async def test_a_dead_letter_table_that_is_unavailable_hands_the_bad_row_back(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("DROP TABLE dead_rows"))
    rows = [row(1), row(2, name=None), row(3)]
    outcome = await insert_isolating(engine, probe, rows, writer="probe", row_key="id")
    assert (outcome.written, outcome.dead, outcome.lost) == (2, 0, 0)
    assert outcome.retry == [rows[1]]
