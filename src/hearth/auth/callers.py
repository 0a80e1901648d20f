"""Callers: internal applications identified by an API key that is stored only as a SHA-256 hash.

This module owns the ``callers`` table. Keys are high-entropy random tokens, so a plain SHA-256
(not a slow password hash) is the right tool: it keeps authentication a dictionary lookup.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from hearth.registry.snapshot import Caller
from hearth.store.tables import callers

KEY_PREFIX = "hk-"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


async def upsert_caller(conn: AsyncConnection, name: str, key: str | None, enabled: bool) -> str | None:
    """Create or update a caller; ``key=None`` keeps the stored key.

    Returns ``"created"``, ``"updated"`` or None when nothing changed.
    """
    row = (await conn.execute(select(callers).where(callers.c.name == name))).mappings().first()
    now = datetime.now(UTC)
    if row is None:
        if key is None:
            raise ValueError(f"caller {name!r} is new and needs a key")
        await conn.execute(callers.insert().values(
            name=name, key_hash=hash_key(key), key_prefix=key[:6], enabled=enabled, created_at=now))
        return "created"
    values: dict[str, object] = {}
    if key is not None and row["key_hash"] != hash_key(key):
        values.update(key_hash=hash_key(key), key_prefix=key[:6])
    if row["enabled"] != enabled:
        values["enabled"] = enabled
    if values:
        await conn.execute(callers.update().where(callers.c.name == name).values(**values))
    return "updated" if values else None


async def load_callers(conn: AsyncConnection) -> dict[str, Caller]:
    rows = (await conn.execute(select(callers))).mappings().all()
    return {r["key_hash"]: Caller(name=r["name"], enabled=r["enabled"]) for r in rows}
