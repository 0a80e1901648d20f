"""Migration 0008 upgrades a database that already has providers and endpoints (SQLite with foreign keys on)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from hearth.store.db import alembic_config, create_engine


def _upgrade_to(revision: str) -> Any:
    from alembic import command

    def run(conn: Connection) -> None:
        command.upgrade(alembic_config(conn), revision)
    return run


async def test_0008_keeps_existing_rows_and_gives_them_the_defaults(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade_to("0007"))
            await conn.execute(text("INSERT INTO providers (name, kind, enabled, updated_at) "
                                    "VALUES ('p', 'openai', true, CURRENT_TIMESTAMP)"))
            await conn.execute(text(
                "INSERT INTO endpoints (name, provider, upstream_model, key_version, max_concurrency, rpm, tpm, "
                "weight, priority, timeout_s, capabilities, enabled, updated_at) VALUES "
                "('e', 'p', 'u', 1, 0, 0, 0, 1.0, 0, 60.0, '[\"chat\"]', true, CURRENT_TIMESTAMP)"))
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade_to("0008"))
        async with engine.connect() as conn:
            provider = (await conn.execute(text(
                "SELECT forward_headers, relay_ratelimit_headers FROM providers"))).one()
            endpoint = (await conn.execute(text(
                "SELECT first_token_timeout_s, stream_idle_timeout_s FROM endpoints"))).one()
        assert provider[0] in ([], "[]") and not provider[1]
        assert tuple(endpoint) == (None, None)
    finally:
        await engine.dispose()
