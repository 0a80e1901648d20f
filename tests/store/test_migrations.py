"""Schema migration: idempotent, safe when several processes start at once, SQLite in WAL mode."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from sqlalchemy import inspect, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import HEAD_REVISION, create_engine, migrate
from hearth.store.tables import meta, metadata


async def table_names(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


async def alembic_versions(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars())


async def test_migrate_creates_every_table(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine)
        assert set(metadata.tables) | {"alembic_version"} <= await table_names(engine)
        assert await alembic_versions(engine) == [HEAD_REVISION]
    finally:
        await engine.dispose()


async def test_migrating_twice_is_a_noop(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine)
        async with engine.begin() as conn:
            await conn.execute(meta.insert().values(key="marker", value="kept"))
        tables = await table_names(engine)
        await migrate(engine)
        assert await table_names(engine) == tables
        assert await alembic_versions(engine) == [HEAD_REVISION]
        async with engine.connect() as conn:
            assert (await conn.execute(select(meta.c.value).where(meta.c.key == "marker"))).scalar() == "kept"
    finally:
        await engine.dispose()


async def test_concurrent_migrations_on_a_fresh_postgres_database_all_succeed(empty_postgres_url: str) -> None:
    engines = [create_engine(empty_postgres_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(e) for e in engines), return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert set(metadata.tables) <= await table_names(engines[0])
        assert await alembic_versions(engines[0]) == [HEAD_REVISION]
    finally:
        for e in engines:
            await e.dispose()


async def test_sqlite_database_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "hearth.db"  # the directory is created on demand
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        await migrate(engine)
        async with engine.connect() as conn:
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
    finally:
        await engine.dispose()
    # WAL is a property of the file: a plain connection that sets nothing sees it too.
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()
