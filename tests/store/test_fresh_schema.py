"""A fresh, empty database is built straight from ``tables.py`` and stamped at the head revision, and what that
builds is exactly what replaying every migration builds: the same columns (types, nullability, defaults),
constraints, indexes (partial-index predicates included), storage options and sequences, read back from the
database's own catalog — more than Alembic's ``compare_metadata`` looks at (it ignores index predicates, server
defaults and storage options)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from hearth.store.db import HEAD_REVISION, create_engine, current_revision, migrate
from tests.pg_databases import create_pg_database, drop_pg_database, pg_dsn_for, pg_url_for

_PG_CATALOG = {
    "columns": """
        SELECT format('%s.%s %s notnull=%s default=%s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
                      a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
          FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped""",
    "constraints": """
        SELECT format('%s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
          FROM pg_constraint WHERE connamespace = 'public'::regnamespace""",
    "indexes": """
        SELECT pg_get_indexdef(indexrelid) FROM pg_index
         WHERE indrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)""",
    "storage": """
        SELECT format('%s %s %s', relname, relkind, reloptions) FROM pg_class
         WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'S')""",
    "sequences": """
        SELECT format('%s %s %s %s %s %s', seqrelid::regclass, seqtypid::regtype, seqstart, seqincrement, seqmax,
                      seqmin) FROM pg_sequence""",
    "triggers": "SELECT format('%s %s', tgrelid::regclass, tgname) FROM pg_trigger WHERE NOT tgisinternal",
}


def _normal_sql(sql: str | None) -> str | None:
    """DDL as SQLite keeps it, without the spelling differences of who wrote it (quotes, spaces, line breaks)."""
    if sql is None:
        return None
    return re.sub(r"\s+", " ", sql.replace('"', "").replace("`", "")).replace("( ", "(").replace(" )", ")").strip()


def _sqlite_schema(path: Path) -> dict[str, list[Any]]:
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                             "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        out: dict[str, list[Any]] = {"tables": tables, "columns": [], "foreign_keys": [], "indexes": []}
        for t in tables:
            # by name, not position: a column a migration added comes last, where the table may list it earlier
            out["columns"] += sorted((t, *row[1:]) for row in conn.execute(f"PRAGMA table_xinfo('{t}')"))
            out["foreign_keys"] += sorted((t, *row[2:]) for row in conn.execute(f"PRAGMA foreign_key_list('{t}')"))
            for _, name, unique, origin, partial in conn.execute(f"PRAGMA index_list('{t}')"):
                key = [tuple(r[2:]) for r in conn.execute(f"PRAGMA index_xinfo('{name}')")]  # names, not positions
                sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
                # automatic indexes (a primary key, a UNIQUE constraint) are named by position: keyed by columns
                label = name if not name.startswith("sqlite_autoindex_") else f"auto {t} {key}"
                out["indexes"].append((t, label, unique, origin, partial, key, _normal_sql(sql)))
        out["indexes"].sort()
        out["checks"] = [(t, sorted(re.findall(r"CHECK \(.*?\)(?=,|\)$| CONSTRAINT)", _normal_sql(
            conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (t,)).fetchone()[0]) or "")))
                         for t in tables]
        return out
    finally:
        conn.close()


async def _pg_schema(name: str) -> dict[str, list[str]]:
    conn = await asyncpg.connect(pg_dsn_for(name), timeout=3)
    try:
        return {part: sorted(r[0] for r in await conn.fetch(query)) for part, query in _PG_CATALOG.items()}
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def two_empty_databases(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """Two new, empty databases of one kind (names, not URLs): SQLite file paths, or PostgreSQL database names."""
    if request.param == "sqlite":
        yield str(tmp_path / "from-tables.db"), str(tmp_path / "from-migrations.db")
        return
    try:
        names = (await create_pg_database(), await create_pg_database())
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL is needed for this test: {exc!r}")
    try:
        yield names
    finally:
        for name in names:
            await drop_pg_database(name)


def _url(name: str) -> str:
    return f"sqlite+aiosqlite:///{name}" if name.endswith(".db") else pg_url_for(name)


async def _build(name: str, *, replay_migrations: bool) -> None:
    engine = create_engine(_url(name))
    try:
        await migrate(engine, replay_migrations=replay_migrations)
        assert await current_revision(engine) == HEAD_REVISION
    finally:
        await engine.dispose()


async def test_a_database_built_from_the_tables_is_the_one_the_migrations_build(
        two_empty_databases: tuple[str, str]) -> None:
    from_tables, from_migrations = two_empty_databases
    await _build(from_tables, replay_migrations=False)
    await _build(from_migrations, replay_migrations=True)
    if from_tables.endswith(".db"):
        built, replayed = _sqlite_schema(Path(from_tables)), _sqlite_schema(Path(from_migrations))
    else:
        built, replayed = await _pg_schema(from_tables), await _pg_schema(from_migrations)
    for part in replayed:
        assert built[part] == replayed[part], part
    assert any(replayed.values())  # the catalog queries did read a schema


async def test_a_database_with_any_table_is_migrated_never_built_from_the_tables(empty_database_url: str) -> None:
    """A database holding a table of ours but no ``alembic_version`` (left by hand, or by another tool) is not
    "fresh": building from the tables would skip the table that is there and stamp the head over a wrong schema.
    The migrations run instead, meet the table, and fail — leaving the database unstamped."""
    engine = create_engine(empty_database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE providers (not_our_shape INTEGER)"))
        with pytest.raises(Exception, match="providers"):
            await migrate(engine)
        assert await current_revision(engine) is None
    finally:
        await engine.dispose()
