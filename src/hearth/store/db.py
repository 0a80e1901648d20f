"""Engine creation and schema migration (Alembic, applied at start).

SQLite runs in WAL mode with a busy timeout so the batch writer and the admin API can share the
file; PostgreSQL migrations take an advisory lock so several processes can start at once.

SQLite takes one writer at a time, and a connection that finds the file locked sleeps in SQLite's
busy handler (1, 2, 5, 10, 15, 20, 25 ms…) before it tries again. With several writers in one
process — budget reservations, settlements, request logs — those sleeps stalled every budgeted
call behind a reservation commit (seen with strace as hundreds of ``clock_nanosleep`` per second,
and as a Hearth process at 91 % of its core under load). :func:`write_transaction` queues a
process's write transactions on an ``asyncio.Lock`` instead, so they never meet inside SQLite;
on PostgreSQL (row locks, many writers) it is a plain transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import orjson
from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table, event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
HEAD_REVISION = "0033"  # the newest migration; a test checks it against Alembic's own view
_MIGRATION_LOCK_ID = 0x4845415254  # "HEART"


def json_dumps(value: Any) -> str:
    """How JSON columns are written: orjson (a request-log row's attempt list took ~4 µs through the
    standard library, under 1 µs here); the standard library for what orjson refuses (integers beyond
    64 bits, NaN), so anything writable before still is."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value)


def json_loads(text: str | bytes) -> Any:
    """How JSON columns are read: orjson, or the standard library for what it wrote (NaN)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def create_engine(url: str, *, pre_ping: bool = True) -> AsyncEngine:
    """An engine for ``url``. ``pre_ping`` (PostgreSQL) checks each pooled connection with a round trip before
    use, so the first request after a database restart does not fail; a caller that retries on its own (the
    task worker's loops) turns it off and saves that round trip on every transaction."""
    if url.startswith("sqlite"):
        _ensure_sqlite_dir(url)
        engine = create_async_engine(url, connect_args={"timeout": 30}, json_serializer=json_dumps,
                                     json_deserializer=json_loads)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return create_async_engine(url, pool_size=10, max_overflow=10, pool_pre_ping=pre_ping, json_serializer=json_dumps,
                               json_deserializer=json_loads)


_write_lanes: WeakKeyDictionary[Engine, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = WeakKeyDictionary()


def write_lane(engine: AsyncEngine) -> contextlib.AbstractAsyncContextManager[object]:
    """What a write transaction holds for its whole length: this process's SQLite writer slot
    (an ``asyncio.Lock`` per engine and event loop), or nothing on PostgreSQL."""
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    loop = asyncio.get_running_loop()
    lane = _write_lanes.get(engine.sync_engine)
    if lane is None or lane[0] is not loop:
        lane = _write_lanes[engine.sync_engine] = (loop, asyncio.Lock())
    return lane[1]


def write_lane_free(engine: AsyncEngine) -> bool:
    """Whether no write transaction of this process holds (or waits for) the write lane right now: a
    transaction that runs to its end without yielding to the event loop may then skip the lane (no
    other transaction of this process is open to meet it inside SQLite). Always True on PostgreSQL."""
    if engine.dialect.name != "sqlite":
        return True
    lane = _write_lanes.get(engine.sync_engine)
    return lane is None or lane[0] is not asyncio.get_running_loop() or not lane[1].locked()


@contextlib.asynccontextmanager
async def write_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """``engine.begin()`` in this process's write lane (see the module docstring)."""
    async with write_lane(engine), engine.begin() as conn:
        yield conn


def _ensure_sqlite_dir(url: str) -> None:
    path = url.split("///", 1)[-1]
    if path and path != ":memory:" and not path.startswith("file:"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config  # imported on demand: a served process never needs it again

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


async def current_revision(engine: AsyncEngine) -> str | None:
    try:
        async with engine.connect() as conn:
            value = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    except Exception:  # no alembic_version table yet: a fresh database
        return None
    return str(value) if value is not None else None


async def migrate(engine: AsyncEngine, *, replay_migrations: bool = False) -> None:
    """Bring the schema to the newest revision; idempotent and safe to run from several processes.

    A database already at :data:`HEAD_REVISION` is recognised with one query, without loading
    Alembic at all (it would stay resident in a serving process for nothing). An empty database —
    no table at all — is built from :mod:`hearth.store.tables` in one transaction and stamped at the
    head (Alembic's "building an up-to-date database from scratch"): replaying every revision took
    0.6 s of a first start, and of every test process that starts on a new file.
    ``tests/store/test_fresh_schema.py`` proves the two build the same schema, catalog for catalog;
    ``replay_migrations`` forces the replay (for that test and the drift test).
    """
    if await current_revision(engine) == HEAD_REVISION:
        return

    def _upgrade(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
        if not replay_migrations and not inspect(conn).get_table_names():
            _build_from_tables(conn)
            return
        from alembic import command

        command.upgrade(alembic_config(conn), "head")

    async with engine.begin() as conn:
        await conn.run_sync(_upgrade)


def _build_from_tables(conn: Connection) -> None:
    """Create every table and index of the metadata, and record the head revision as Alembic would."""
    from hearth.store.tables import metadata

    metadata.create_all(conn, checkfirst=False)
    version = Table("alembic_version", MetaData(),
                    Column("version_num", String(32), nullable=False),
                    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"))
    version.create(conn)
    conn.execute(version.insert().values(version_num=HEAD_REVISION))


async def stop_writer_task(task: asyncio.Task[None], grace_s: float = 10.0) -> None:
    """Wait for a batch writer's loop to end after it was told to stop; cancel it only after ``grace_s``.

    Cancelling a writer in the middle of a commit is what this avoids: the batch could be committed
    yet still queued (written twice, or refused by a unique constraint so the rows behind it are
    never written), and an interrupted SQLite transaction can hold the database lock.
    """
    done, _ = await asyncio.wait({task}, timeout=grace_s)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
