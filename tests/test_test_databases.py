"""The tests' PostgreSQL databases (tests/pg_databases.py): a database a test gave back is handed out again only
once it is equivalent to a freshly migrated one — empty, sequences restarted, nobody connected, the schema the
template's — and under a new name; otherwise it is dropped and a new copy of the template handed out instead.

Each test here has a pool of its own (on this process's template), so what it acquires is what it released.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from hearth.store.db import HEAD_REVISION
from tests.pg_databases import PG_SCHEMA_FINGERPRINT, PgDatabasePool, PgTemplate
from tests.support import PG_ADMIN_DSN


@pytest.fixture
def pool(pg_template: PgTemplate) -> Iterator[PgDatabasePool]:
    pool = PgDatabasePool(pg_template)
    yield pool
    pool.close()


def dsn(name: str) -> str:
    return PG_ADMIN_DSN.rsplit("/", 1)[0] + "/" + name


async def database_oid(name: str) -> int | None:
    """The database's object id (kept by a rename; a new copy has a new one), None once it is gone."""
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        return await conn.fetchval("SELECT oid FROM pg_database WHERE datname = $1", name)
    finally:
        await conn.close()


async def oid_exists(oid: int) -> bool:
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        return bool(await conn.fetchval("SELECT EXISTS (SELECT FROM pg_database WHERE oid = $1)", oid))
    finally:
        await conn.close()


async def fill_every_table(conn: Any) -> None:
    """One row in every table but alembic_version (foreign keys not checked: replica role), and every sequence
    moved on: serial columns take their default, other columns a value of their type."""
    value = {"integer": "1", "bigint": "1", "double precision": "1.5", "boolean": "true", "json": "'{}'",
             "text": "'x'", "character varying": "'x'", "timestamp with time zone": "now()",
             "bytea": "'x'::bytea"}
    columns = await conn.fetch("SELECT table_name, column_name, data_type, column_default"
                               " FROM information_schema.columns"
                               " WHERE table_schema = 'public' AND table_name <> 'alembic_version'"
                               " ORDER BY table_name, ordinal_position")
    tables: dict[str, list[tuple[str, str]]] = {}
    for c in columns:
        tables.setdefault(c["table_name"], [])
        if c["column_default"] is None:
            tables[c["table_name"]].append((c["column_name"], value[c["data_type"]]))
    async with conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        for table, given in tables.items():
            names = ", ".join(f'"{n}"' for n, _ in given)
            await conn.execute(f'INSERT INTO "{table}" ({names}) VALUES ({", ".join(v for _, v in given)})')
    for seq in await conn.fetch("SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"):
        await conn.execute(f"SELECT nextval('{seq[0]}'), nextval('{seq[0]}')")


async def rows_by_table(conn: Any) -> dict[str, int]:
    tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                              " AND tablename <> 'alembic_version'")
    return {t[0]: await conn.fetchval(f'SELECT count(*) FROM "{t[0]}"') for t in tables}


async def assert_as_freshly_migrated(name: str, template: PgTemplate) -> None:
    """The template's schema, alembic_version at the head revision, no rows, every sequence at its start, nobody
    else connected and no advisory lock held."""
    conn = await asyncpg.connect(dsn(name))
    try:
        assert await conn.fetchval(PG_SCHEMA_FINGERPRINT) == template.fingerprint
        assert [r[0] for r in await conn.fetch("SELECT version_num FROM alembic_version")] == [HEAD_REVISION]
        rows = await rows_by_table(conn)
        assert len(rows) > 20 and set(rows.values()) == {0}, rows
        sequences = await conn.fetch("SELECT sequencename, start_value FROM pg_sequences WHERE schemaname = 'public'")
        assert sequences
        for seq, start in sequences:
            assert await conn.fetchval(f"SELECT nextval('{seq}')") == start == 1
        assert await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
                                   " AND pid <> pg_backend_pid()", name) == 0
        assert await conn.fetchval("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                                   " WHERE l.locktype = 'advisory' AND d.datname = $1", name) == 0
    finally:
        await conn.close()


async def test_a_database_given_back_is_emptied_and_handed_out_again_under_a_new_name(
        pool: PgDatabasePool) -> None:
    first = pool.acquire()
    oid = await database_oid(first)
    conn = await asyncpg.connect(dsn(first))
    try:
        await fill_every_table(conn)
        rows = await rows_by_table(conn)
        assert len(rows) > 20 and set(rows.values()) == {1}, rows
    finally:
        await conn.close()
    pool.release(first)

    second = pool.acquire()
    assert second != first and second.startswith("hearth_t_")
    assert await database_oid(second) == oid  # the same database, reused
    assert (pool.copied, pool.reused, pool.replaced) == (1, 1, [])
    await assert_as_freshly_migrated(second, pool.template)
    with pytest.raises(asyncpg.InvalidCatalogNameError):  # the URL handed out before reaches nothing now
        await asyncpg.connect(dsn(first))


async def test_connections_left_open_do_not_block_the_reset_and_take_their_locks_with_them(
        pool: PgDatabasePool) -> None:
    first = pool.acquire()
    oid = await database_oid(first)
    locker = await asyncpg.connect(dsn(first))  # a transaction left open, holding a table lock and a row
    idle = await asyncpg.connect(dsn(first))  # a row committed, a session-level advisory lock, a LISTEN; idle
    try:
        await locker.execute("BEGIN; LOCK TABLE budget_ledger IN ACCESS EXCLUSIVE MODE;"
                             " SELECT pg_advisory_xact_lock(41);"
                             " INSERT INTO dead_rows (created_at, writer, error, payload)"
                             " VALUES (now(), 'w', 'e', '{}')")
        await idle.execute("INSERT INTO dead_rows (created_at, writer, error, payload) VALUES (now(), 'w', 'e', '{}');"
                           " SELECT pg_advisory_lock(42); LISTEN left_behind")
        pids = {locker.get_server_pid(), idle.get_server_pid()}
        pool.release(first)  # neither connection closed

        started = time.monotonic()
        second = pool.acquire()
        assert time.monotonic() - started < 3
        assert await database_oid(second) == oid and pool.replaced == []
        await assert_as_freshly_migrated(second, pool.template)
        admin = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            assert await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])",
                                        list(pids)) == 0
        finally:
            await admin.close()
        with pytest.raises(asyncpg.InterfaceError):  # the connection is closed
            await idle.fetchval("SELECT 1")
    finally:
        locker.terminate()
        idle.terminate()


SCHEMA_CHANGES = {
    "a table created": "CREATE TABLE probe_rows (id int PRIMARY KEY)",
    "a table dropped": "DROP TABLE dead_rows",
    "a column added": "ALTER TABLE budget_ledger ADD COLUMN extra int",
    "a column made NOT NULL": "ALTER TABLE dead_rows ALTER COLUMN row_key SET NOT NULL",
    "a column default": "ALTER TABLE dead_rows ALTER COLUMN row_key SET DEFAULT 'k'",
    "a constraint": "ALTER TABLE dead_rows ADD CONSTRAINT ck_no_doomed CHECK (writer <> 'doomed')",
    "an index": "CREATE INDEX ix_extra ON dead_rows (writer)",
    "a function and a trigger": (
        "CREATE FUNCTION die() RETURNS trigger AS $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid());"
        " RETURN NEW; END $$ LANGUAGE plpgsql;"
        " CREATE TRIGGER die BEFORE INSERT ON dead_rows FOR EACH ROW WHEN (NEW.writer = 'die') EXECUTE FUNCTION die()"),
    "foreign keys disabled": "ALTER TABLE endpoints DISABLE TRIGGER ALL",
    "a sequence's increment": "ALTER SEQUENCE dead_rows_id_seq INCREMENT BY 5",
    "another schema": "CREATE SCHEMA other; CREATE TABLE other.t (i int)",
    "a setting of the database": "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET work_mem = ''8MB''',"
                                 " current_database()); END $$",
    "alembic_version behind": "UPDATE alembic_version SET version_num = '0001'",
    "alembic_version emptied": "DELETE FROM alembic_version",
}


@pytest.mark.parametrize("change", SCHEMA_CHANGES.values(), ids=SCHEMA_CHANGES.keys())
async def test_the_reset_refuses_a_database_whose_schema_changed(postgres_url: str, pg_template: PgTemplate,
                                                                  change: str) -> None:
    """Each change, made and rolled back in one transaction (DDL is transactional): the reset refuses it."""
    conn = await asyncpg.connect(dsn(postgres_url.rsplit("/", 1)[1]))
    try:
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute(change)
            with pytest.raises(asyncpg.RaiseError, match=r"schema differs|alembic_version is"):
                await conn.execute(pg_template.reset_sql())
        finally:
            await transaction.rollback()
        await conn.execute(pg_template.reset_sql())  # and without the change it resets
    finally:
        await conn.close()


@pytest.mark.parametrize("change", [SCHEMA_CHANGES["a function and a trigger"], SCHEMA_CHANGES["a table dropped"],
                                    SCHEMA_CHANGES["alembic_version behind"]], ids=["trigger", "drop", "alembic"])
async def test_a_database_whose_schema_a_test_changed_is_dropped_not_reused(pool: PgDatabasePool,
                                                                           change: str) -> None:
    first = pool.acquire()
    oid = await database_oid(first)
    assert oid is not None
    conn = await asyncpg.connect(dsn(first))
    try:
        await conn.execute(change)
    finally:
        await conn.close()
    pool.release(first)

    second = pool.acquire()
    assert (pool.copied, pool.reused, len(pool.replaced)) == (2, 0, 1), pool.replaced
    assert await database_oid(second) != oid
    assert not await oid_exists(oid)  # dropped
    await assert_as_freshly_migrated(second, pool.template)


async def test_the_fixtures_hand_out_a_database_as_freshly_migrated(postgres_url: str, pg_template: PgTemplate) -> None:
    await assert_as_freshly_migrated(postgres_url.rsplit("/", 1)[1], pg_template)
