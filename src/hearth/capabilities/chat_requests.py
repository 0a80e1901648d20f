"""Idempotent chat requests: the same (caller, user, ``request_id``) makes one model call, ever — across
processes too, because the claim is a row in the database (seed 001 §7.2: ``UNIQUE(user_id, request_id)``).

:func:`claim` inserts the row (``running``); whoever inserted it runs the call and records the outcome
with :func:`finish` (the events sent and the answer, or the error). Everyone else gets the row: still
running (join it, or be told so), or finished (the stored answer is replayed; no model call). A row is
kept for ``keep_s`` after it finished; a claim after that replaces it (the client asked again, much later).
A running row older than ``stale_s`` belonged to a process that died mid-call: its claim may be taken over.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import write_transaction
from hearth.store.tables import chat_requests

_C = chat_requests.c


@dataclass(frozen=True, slots=True)
class ChatKey:
    caller: str
    end_user: str
    request_id: str


@dataclass(frozen=True, slots=True)
class Claim:
    """``won``: this caller runs the call. Otherwise ``row`` is the existing request's state."""

    won: bool
    row: dict[str, Any] | None = None


async def claim(engine: AsyncEngine, key: ChatKey, *, keep_s: float, stale_s: float) -> Claim:
    now = datetime.now(UTC)
    where = and_(_C.caller == key.caller, _C.end_user == key.end_user, _C.request_id == key.request_id)
    for _ in range(3):
        try:
            async with write_transaction(engine) as conn:
                # An expired answer, or a run whose process died long ago, gives way to this claim.
                await conn.execute(delete(chat_requests).where(where, or_(
                    and_(_C.status != "running", _C.finished_at < now - timedelta(seconds=keep_s)),
                    and_(_C.status == "running", _C.created_at < now - timedelta(seconds=stale_s)))))
                await conn.execute(chat_requests.insert().values(
                    caller=key.caller, end_user=key.end_user, request_id=key.request_id, status="running",
                    created_at=now))
            return Claim(True)
        except IntegrityError:
            row = await read(engine, key)
            if row is not None:
                return Claim(False, row)
    raise RuntimeError("the chat request row could be neither claimed nor read")


async def read(engine: AsyncEngine, key: ChatKey) -> dict[str, Any] | None:
    async with engine.connect() as conn:
        row = (await conn.execute(select(chat_requests).where(
            _C.caller == key.caller, _C.end_user == key.end_user, _C.request_id == key.request_id))).mappings().first()
    return dict(row) if row is not None else None


async def finish(engine: AsyncEngine, key: ChatKey, *, status: str, events: list[dict[str, Any]] | None,
                 result: dict[str, Any] | None, error: dict[str, Any] | None) -> None:
    async with write_transaction(engine) as conn:
        await conn.execute(update(chat_requests).where(
            _C.caller == key.caller, _C.end_user == key.end_user, _C.request_id == key.request_id,
            _C.status == "running").values(status=status, events=events, result=result, error=error,
                                           finished_at=datetime.now(UTC)))
