"""Stored responses: the ``responses`` table (one row per Response object created with ``store`` not false).

A row is the Response object as returned and the conversation up to and including it, as chat messages,
so continuing it (``previous_response_id``) is one primary-key read, not a walk up the chain; the cost is
that each row repeats its chain's earlier turns (a conversation of n turns stores O(n²) messages — bounded
by the retention, and by the request size limit, since a chain's history is sent upstream each turn).

Every read, chain and delete is scoped to the caller that created the row: another caller's id is
answered exactly like an id that does not exist (404), so ids reveal nothing. A row past ``expires_at``
is gone for every purpose at once; expired rows are deleted by the next write of this process that
comes at least :data:`PURGE_INTERVAL_S` after the previous purge (no background task, no extra
writes while nothing is stored).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import write_transaction
from hearth.store.tables import responses

__all__ = ["PURGE_INTERVAL_S", "StoredResponse", "delete_response", "load_response", "save_response"]

PURGE_INTERVAL_S = 60.0
_C = responses.c
_last_purge: WeakKeyDictionary[Engine, float] = WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: dict[str, Any]
    conversation: list[dict[str, Any]]


async def save_response(engine: AsyncEngine, *, caller: str, response: dict[str, Any],
                        conversation: list[dict[str, Any]], retention_s: float,
                        now: float | None = None) -> None:
    """Store ``response`` (its ``id`` is the key) and its conversation, kept for ``retention_s``."""
    at = time.time() if now is None else now
    purge = at - _last_purge.get(engine.sync_engine, 0.0) >= PURGE_INTERVAL_S
    async with write_transaction(engine) as conn:
        if purge:
            await conn.execute(delete(responses).where(_C.expires_at <= at))
        await conn.execute(responses.insert().values(
            id=response["id"], caller=caller, previous_response_id=response.get("previous_response_id"),
            response=response, conversation=conversation, created_at=at, expires_at=at + retention_s))
    if purge:
        _last_purge[engine.sync_engine] = at


async def load_response(engine: AsyncEngine, *, caller: str, response_id: str,
                        now: float | None = None) -> StoredResponse | None:
    """The caller's live response ``response_id``; None if there is none (absent, expired or another caller's)."""
    at = time.time() if now is None else now
    async with engine.connect() as conn:
        row = (await conn.execute(select(_C.response, _C.conversation).where(
            _C.id == response_id, _C.caller == caller, _C.expires_at > at))).first()
    return StoredResponse(row.response, row.conversation) if row is not None else None


async def delete_response(engine: AsyncEngine, *, caller: str, response_id: str, now: float | None = None) -> bool:
    """Delete the caller's live response ``response_id``; False if there was none to delete."""
    at = time.time() if now is None else now
    async with write_transaction(engine) as conn:
        result = await conn.execute(delete(responses).where(
            _C.id == response_id, _C.caller == caller, _C.expires_at > at))
    return bool(result.rowcount)
