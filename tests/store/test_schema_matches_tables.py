"""The migrations produce exactly the schema that ``tables.py`` describes (no drift)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Connection

from hearth.store.db import create_engine, migrate
from hearth.store.tables import metadata


async def test_migrated_schema_has_no_diff_against_table_definitions(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine, replay_migrations=True)  # an empty database would otherwise be built from the tables

        def diff(conn: Connection) -> list[object]:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, metadata))

        async with engine.connect() as conn:
            problems = await conn.run_sync(diff)
    finally:
        await engine.dispose()
    assert problems == []


def test_head_revision_constant_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    from hearth.store.db import HEAD_REVISION, alembic_config

    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD_REVISION
