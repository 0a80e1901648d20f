"""Stored responses: the ``responses`` table (one row per Response object created with ``store`` not false).

**Answer first, write meanwhile — and still read your writes.** A non-stream response is written by a
task of its own, started when the answer is ready, so the caller does not wait for a database commit
(about 0.4 ms on SQLite at c=1: bench/BENCHMARKS.md). A client may still use the id as soon as it has
the answer:

* in this process, the id is *pending* (:class:`PendingWrites`) until its write ended; a read, chain or
  delete of a pending id waits for the write first;
* in another process, a lookup that misses an id younger than :data:`WRITE_WINDOW_S` (the id carries
  its creation time: :func:`~hearth.responses.objects.response_age_s`) looks again every few
  milliseconds while the id is that young and no row of that id exists — a write lands within a
  millisecond or two, so a chain sent to another replica right after the answer waits about that long;
  an unknown young id costs at most the window; another caller's id, none.

A write that fails (the database down) is logged (``response_not_stored``): the answer was delivered, the
id then answers 404. A graceful stop waits for the writes under way (:meth:`PendingWrites.drain`, in the
runtime's stop); a process killed mid-write loses that response. A stream's response is written before its
final event instead (one commit at the end of a long stream is not worth the machinery).

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

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.observability.logging import get_logger
from hearth.responses.objects import response_age_s
from hearth.store.db import write_transaction
from hearth.store.direct_sqlite import DirectSqliteWriter
from hearth.store.tables import responses

__all__ = ["PURGE_INTERVAL_S", "WRITE_WINDOW_S", "PendingWrites", "StoredResponse", "delete_response",
           "load_response", "pending_writes", "save_response"]

log = get_logger("hearth.responses")
PURGE_INTERVAL_S = 60.0
WRITE_WINDOW_S = 2.0  # how long after its creation another process may still be writing a response
DRAIN_TIMEOUT_S = 5.0  # how long a stopping process waits for its writes under way
_RECHECK_S = 0.005
_C = responses.c
_last_purge: WeakKeyDictionary[Engine, float] = WeakKeyDictionary()
_pending: WeakKeyDictionary[Engine, PendingWrites] = WeakKeyDictionary()
_direct: WeakKeyDictionary[Engine, DirectSqliteWriter | None] = WeakKeyDictionary()
T = TypeVar("T")


class PendingWrites:
    """The responses of this process answered but not yet written: id → the write's task.

    A write is a task of its own from the moment the answer is ready, so it ends whatever happens to the
    answer (a client that left does not leave an id pending forever)."""

    def __init__(self) -> None:
        self._writes: dict[str, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._writes)

    def start(self, response_id: str, write: Callable[[], Awaitable[None]]) -> None:
        """Run ``write()`` now, in the background; ``response_id`` is pending until it ended (failed too)."""

        async def run() -> None:
            try:
                await write()
            except Exception as exc:  # the answer was delivered: the id then answers 404
                log.error("response_not_stored", response_id=response_id, error=type(exc).__name__, exc_info=exc)
            finally:
                self._writes.pop(response_id, None)

        self._writes[response_id] = asyncio.get_running_loop().create_task(run(), name="response-write")

    async def settled(self, response_id: str) -> None:
        """Return once ``response_id`` is not being written by this process."""
        task = self._writes.get(response_id)
        if task is not None:
            await asyncio.wait((task,))

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Wait for the writes under way, at most ``timeout_s`` (a stopping process: a database that does not
        answer must not hold the shutdown; what is still unwritten then is lost, as in a crash)."""
        deadline = time.monotonic() + timeout_s
        while self._writes and (left := deadline - time.monotonic()) > 0:
            await asyncio.wait(list(self._writes.values()), timeout=left)


def pending_writes(engine: AsyncEngine) -> PendingWrites:
    """This process's pending writes to ``engine``'s database."""
    pending = _pending.get(engine.sync_engine)
    if pending is None:
        pending = _pending[engine.sync_engine] = PendingWrites()
    return pending


async def _read_your_write(engine: AsyncEngine, response_id: str, *, young: bool,
                           look: Callable[[], Awaitable[T]], missed: Callable[[T], bool]) -> T:
    """``look()``, after this process's pending write of the id; again while it misses an id young enough to be
    in another process's write (and not written already: another caller's id is not waited for)."""
    await pending_writes(engine).settled(response_id)
    found = await look()
    deadline = time.monotonic() + WRITE_WINDOW_S
    while young and missed(found) and time.monotonic() < deadline:
        age = response_age_s(response_id)
        if age is None or not -WRITE_WINDOW_S < age < WRITE_WINDOW_S:
            break
        if await _exists(engine, response_id):  # written since the last look (or another caller's: missed again)
            return await look()
        await asyncio.sleep(_RECHECK_S)
        found = await look()
    return found


async def _exists(engine: AsyncEngine, response_id: str) -> bool:
    async with engine.connect() as conn:
        return (await conn.execute(select(_C.id).where(_C.id == response_id))).first() is not None


@dataclass(frozen=True, slots=True)
class StoredResponse:
    response: dict[str, Any]
    conversation: list[dict[str, Any]]


async def save_response(engine: AsyncEngine, *, caller: str, response: dict[str, Any],
                        conversation: list[dict[str, Any]], retention_s: float,
                        now: float | None = None) -> None:
    """Store ``response`` (its ``id`` is the key) and its conversation, kept for ``retention_s``."""
    at = time.time() if now is None else now
    row = {"id": response["id"], "caller": caller, "previous_response_id": response.get("previous_response_id"),
           "response": response, "conversation": conversation, "created_at": at, "expires_at": at + retention_s}
    purge = at - _last_purge.get(engine.sync_engine, 0.0) >= PURGE_INTERVAL_S
    direct = None if purge else _direct_writer(engine)
    if direct is not None:  # SQLite: the insert's transaction in one step (hearth.store.direct_sqlite)
        await direct.insert(responses, [row])
        return
    async with write_transaction(engine) as conn:
        if purge:
            await conn.execute(delete(responses).where(_C.expires_at <= at))
        await conn.execute(responses.insert().values(**row))
    if purge:
        _last_purge[engine.sync_engine] = at


def _direct_writer(engine: AsyncEngine) -> DirectSqliteWriter | None:
    """This process's one-hop writer to ``engine``'s SQLite file (None on PostgreSQL). Through SQLAlchemy and
    aiosqlite one insert crosses to the driver's thread and back about four times, ~1 ms of CPU per stored
    response on a busy machine; in one hop about a fifth of that (bench/BENCHMARKS.md). Its thread and
    connection live as long as the process (one per database)."""
    if engine.sync_engine not in _direct:
        _direct[engine.sync_engine] = DirectSqliteWriter.for_engine(engine)
    return _direct[engine.sync_engine]


async def load_response(engine: AsyncEngine, *, caller: str, response_id: str,
                        now: float | None = None) -> StoredResponse | None:
    """The caller's live response ``response_id``; None if there is none (absent, expired or another caller's).
    Without ``now`` (a live request), an id still being written is waited for (the module docstring)."""

    async def look() -> StoredResponse | None:
        at = time.time() if now is None else now
        async with engine.connect() as conn:
            row = (await conn.execute(select(_C.response, _C.conversation).where(
                _C.id == response_id, _C.caller == caller, _C.expires_at > at))).first()
        return StoredResponse(row.response, row.conversation) if row is not None else None

    return await _read_your_write(engine, response_id, young=now is None, look=look,
                                  missed=lambda found: found is None)


async def delete_response(engine: AsyncEngine, *, caller: str, response_id: str, now: float | None = None) -> bool:
    """Delete the caller's live response ``response_id``; False if there was none to delete (an id still being
    written is waited for, as by :func:`load_response`)."""

    async def look() -> bool:
        at = time.time() if now is None else now
        async with write_transaction(engine) as conn:
            result = await conn.execute(delete(responses).where(
                _C.id == response_id, _C.caller == caller, _C.expires_at > at))
        return bool(result.rowcount)

    return await _read_your_write(engine, response_id, young=now is None, look=look,
                                  missed=lambda deleted: not deleted)
