"""The usage-event outbox: settled calls' ``AIUsageRecorded`` events, owed to each configured sink.

**Writing** never touches the hot path. The request-log writer hands each batch of records it wrote to
:meth:`UsageOutboxWriter.add` (in its own background flush); this writer turns the gateway calls among
them into events (:mod:`hearth.observability.usage_events`), one row per event and sink, and inserts them
in batches from its own bounded queue, with the request-log writer's guarantees: the oldest rows are
dropped (and counted) when the queue is full, a row the database refuses is dead-lettered without
costing the others, and rows are kept and retried with a backoff while the database is unavailable.
With no sink configured there is no writer at all: no row is written.

**Delivering** is the relay's (:mod:`hearth.usage.relay`), through the functions below. Rows are claimed
per sink with a lease (``delivering`` until ``lease_until``), on PostgreSQL with ``FOR UPDATE SKIP
LOCKED`` so any number of relays share the work, on SQLite in the process's write lane. A relay that dies
leaves its rows to be claimed again when the lease ends: delivery is at least once, and the event id is
the receivers' deduplication key. Delivered rows are deleted after a retention period. This module owns
the ``usage_outbox`` table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.observability.logging import get_logger
from hearth.observability.request_log import RequestLogRecord
from hearth.observability.usage_events import ProviderOf, is_settled_call, new_event_id, usage_event
from hearth.store.db import write_transaction
from hearth.store.queued_rows import QueuedRows
from hearth.store.tables import usage_outbox

log = get_logger("hearth.usage_outbox")

SINKS = ("webhook", "nats", "amqp")
_ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One claimed delivery: the event (JSON text) owed to the sink it was claimed for."""

    id: int
    event_id: str
    payload: str
    attempts: int


class UsageOutboxWriter(QueuedRows):
    """Writes events' outbox rows in batches, one row per configured sink (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, sinks: Sequence[str], provider_of: ProviderOf, *,
                 max_queue: int = 20_000, batch: int = 500, flush_s: float = 0.5, clock: Clock = SYSTEM_CLOCK) -> None:
        unknown = set(sinks) - set(SINKS)
        if unknown or not sinks:
            raise ValueError(f"sinks must be a non-empty subset of {SINKS}, not {list(sinks)}")
        super().__init__(engine, usage_outbox, name="usage_outbox", row_key="event_id",
                         max_rows=max_queue * len(sinks), batch=batch, flush_s=flush_s)
        self.sinks = tuple(sinks)
        self._provider_of = provider_of
        self._clock = clock
        self.events = 0  # events made (each becomes one row per sink)

    def add(self, records: Sequence[RequestLogRecord]) -> None:
        """Queue the events of ``records`` (written request-log records; capability rows are skipped)."""
        now = self._clock.now()
        rows: list[dict[str, Any]] = []
        for record in records:
            if not is_settled_call(record):
                continue
            event_id = new_event_id()
            try:
                payload = orjson.dumps(usage_event(record, event_id=event_id, provider_of=self._provider_of)).decode()
            except (TypeError, ValueError) as exc:  # a mistyped field the request log dead-lettered: no event
                log.warning("usage_event_not_made", request_id=str(record.request_id)[:64], error=type(exc).__name__)
                continue
            self.events += 1
            rows += ({"event_id": event_id, "sink": sink, "payload": payload, "state": "pending", "attempts": 0,
                      "next_at": now, "lease_until": None, "last_error": None, "created_at": now,
                      "delivered_at": None} for sink in self.sinks)  # every column: a batch can go in one hop
        self.put(rows)

    def stats(self) -> dict[str, int | str | None]:
        return {"events": self.events, **super().stats()}


async def claim_due(engine: AsyncEngine, sink: str, *, now: float, limit: int, lease_s: float) -> list[OutboxRow]:
    """Lease up to ``limit`` rows of ``sink`` that are due (pending and due, or delivering past their lease)."""
    t = usage_outbox
    due = (t.c.sink == sink) & (((t.c.state == "pending") & (t.c.next_at <= now))
                                | ((t.c.state == "delivering") & (t.c.lease_until < now)))
    async with write_transaction(engine) as conn:
        stmt = (select(t.c.id, t.c.event_id, t.c.payload, t.c.attempts).where(due)
                .order_by(t.c.next_at, t.c.id).limit(limit))
        if conn.dialect.name == "postgresql":
            stmt = stmt.with_for_update(skip_locked=True)
        rows = (await conn.execute(stmt)).all()
        if rows:
            await conn.execute(update(t).where(t.c.id.in_([r.id for r in rows]))
                               .values(state="delivering", lease_until=now + lease_s))
    return [OutboxRow(id=int(r.id), event_id=r.event_id, payload=r.payload, attempts=int(r.attempts)) for r in rows]


async def mark_delivered(engine: AsyncEngine, ids: Sequence[int], *, now: float) -> None:
    if not ids:
        return
    t = usage_outbox
    async with write_transaction(engine) as conn:
        await conn.execute(update(t).where(t.c.id.in_(list(ids)), t.c.state == "delivering").values(
            state="delivered", delivered_at=now, lease_until=None, attempts=t.c.attempts + 1, last_error=None))


async def release(engine: AsyncEngine, ids: Sequence[int]) -> None:
    """Give claimed rows back at once, unattempted (a relay stopping mid-round; it may have sent some)."""
    if not ids:
        return
    t = usage_outbox
    async with write_transaction(engine) as conn:
        await conn.execute(update(t).where(t.c.id.in_(list(ids)), t.c.state == "delivering").values(
            state="pending", lease_until=None))


async def mark_failed(engine: AsyncEngine, failed: Sequence[tuple[OutboxRow, str]], *, now: float,
                      retry_in_s: Callable[[int], float]) -> None:
    """Make each failed row pending again, ``retry_in_s(attempts)`` from ``now``, with its error (bounded)."""
    if not failed:
        return
    t = usage_outbox
    params = [{"b_id": row.id, "b_attempts": row.attempts + 1, "b_next": now + retry_in_s(row.attempts + 1),
               "b_error": error[:_ERROR_CHARS]} for row, error in failed]
    stmt = (update(t).where(t.c.id == bindparam("b_id"), t.c.state == "delivering")
            .values(state="pending", attempts=bindparam("b_attempts"), next_at=bindparam("b_next"),
                    last_error=bindparam("b_error"), lease_until=None))
    async with write_transaction(engine) as conn:
        await conn.execute(stmt, params)


async def delete_delivered(engine: AsyncEngine, *, before: float, limit: int = 1000) -> int:
    """Delete up to ``limit`` rows delivered before ``before``; how many."""
    t = usage_outbox
    oldest = select(t.c.id).where(t.c.state == "delivered", t.c.delivered_at < before).limit(limit)
    async with write_transaction(engine) as conn:
        result = await conn.execute(delete(t).where(t.c.id.in_(oldest)))
    return int(result.rowcount or 0)


async def backlog(engine: AsyncEngine) -> dict[str, dict[str, int]]:
    """Rows per sink and state (what an operator checks when a sink is down)."""
    t = usage_outbox
    async with engine.connect() as conn:
        rows = (await conn.execute(select(t.c.sink, t.c.state, func.count()).group_by(t.c.sink, t.c.state))).all()
    out: dict[str, dict[str, int]] = {}
    for sink, state, count in rows:
        out.setdefault(sink, {})[state] = int(count)
    return out
