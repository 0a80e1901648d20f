"""The alert log: what an operator must hear about, deduplicated within a window, owed to the alert webhook.

:func:`record` is the one way an alert is raised — from a scheduler pass that polls a condition
(:mod:`hearth.alerting.checks`), from the transaction that opens a dead letter, from the process that disables
an endpoint. Its contract:

* **One alert per (kind, subject) per window.** The first occurrence inserts a row owed to the webhook and
  opens a window of ``window_s``; a repeat inside it only counts (``suppressed``) and sends nothing; the first
  occurrence after it inserts the next row, carrying the count (``previous_suppressed``) so the receiver hears
  how many repeats it was spared. Concurrent processes agree: on PostgreSQL the check-and-insert holds a
  transaction-scoped advisory lock on the dedup key; SQLite serialises writers.
* **Owed durably.** The row is the delivery: :func:`claim_due` leases due rows (``SKIP LOCKED`` on
  PostgreSQL) for :class:`hearth.alerting.sender.AlertSender`, which records each outcome with
  :func:`finish` (the shape of :func:`hearth.tasks.webhook_post.delivery_outcome`).

This module owns the ``alerts`` table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.store.db import write_transaction
from hearth.store.tables import alerts

KINDS = ("endpoint_disabled", "breaker_open", "budget_threshold", "dead_letter", "queue_backlog",
         "review_expiring", "review_expired")
SEVERITIES = ("P1", "P2", "P3")
STATES = ("pending", "delivering", "delivered", "gave_up")
_a = alerts.c
_KEY_MAX = 300


@dataclass(frozen=True, slots=True)
class Alert:
    kind: str
    subject: str
    severity: str
    payload: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.severity not in SEVERITIES:
            raise ValueError(f"unknown alert kind {self.kind!r} or severity {self.severity!r}")


def dedup_key(kind: str, subject: str) -> str:
    """``kind:subject``; a subject too long for the column is replaced by its hash (still one key per subject)."""
    key = f"{kind}:{subject}"
    if len(key) > _KEY_MAX:
        key = f"{kind}:sha256:{hashlib.sha256(subject.encode()).hexdigest()}"
    return key


async def record(conn: AsyncConnection, alert: Alert, *, now: float, window_s: float) -> int | None:
    """Raise ``alert`` in the caller's transaction: the new row's id, or None when it fell into the window of
    the previous one (counted there as suppressed)."""
    key = dedup_key(alert.kind, alert.subject)
    if conn.dialect.name == "postgresql":
        lock_id = int.from_bytes(hashlib.sha256(b"alert:" + key.encode()).digest()[:8], "big", signed=True)
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_id})
    last = (await conn.execute(select(_a.id, _a.window_end, _a.suppressed).where(_a.dedup_key == key)
                               .order_by(_a.window_start.desc()).limit(1))).mappings().first()
    if last is not None and now < last["window_end"]:
        await conn.execute(update(alerts).where(_a.id == last["id"]).values(
            suppressed=_a.suppressed + 1, last_seen_at=now))
        return None
    result = await conn.execute(alerts.insert().values(
        kind=alert.kind, subject=alert.subject[:256], severity=alert.severity, payload=dict(alert.payload),
        dedup_key=key, window_start=now, window_end=now + window_s, suppressed=0,
        previous_suppressed=int(last["suppressed"]) if last is not None else 0, last_seen_at=now,
        state="pending", attempts=0, next_at=now, created_at=now).returning(_a.id))
    return int(result.scalar_one())


async def record_now(engine: AsyncEngine, alert: Alert, *, now: float, window_s: float) -> int | None:
    """:func:`record` in a transaction of its own."""
    async with write_transaction(engine) as conn:
        return await record(conn, alert, now=now, window_s=window_s)


async def claim_due(engine: AsyncEngine, *, now: float, lease_s: float, limit: int) -> Sequence[Mapping[Any, Any]]:
    """Lease up to ``limit`` alerts due for delivery (pending and due, or delivering with a lapsed lease)."""
    async with write_transaction(engine) as conn:
        due = (((_a.state == "pending") & (_a.next_at <= now))
               | ((_a.state == "delivering") & (_a.lease_until < now)))
        stmt = select(alerts).where(due).order_by(_a.next_at).limit(limit)
        if conn.dialect.name == "postgresql":
            stmt = stmt.with_for_update(skip_locked=True)
        rows = list((await conn.execute(stmt)).mappings().all())
        if rows:
            await conn.execute(update(alerts).where(_a.id.in_([r["id"] for r in rows])).values(
                state="delivering", lease_until=now + lease_s))
    return rows


async def finish(engine: AsyncEngine, alert_id: int, values: Mapping[str, Any]) -> None:
    """Record a delivery attempt's outcome, unless the lease was lost to another sender meanwhile."""
    async with write_transaction(engine) as conn:
        await conn.execute(update(alerts).where(_a.id == alert_id, _a.state == "delivering").values(**values))


async def page(engine: AsyncEngine, *, kind: str | None, state: str | None, before_id: int | None,
               limit: int) -> Sequence[Mapping[Any, Any]]:
    """Newest first, keyset-paged by id (``before_id``: the last id of the previous page)."""
    stmt = select(alerts)
    if kind is not None:
        stmt = stmt.where(_a.kind == kind)
    if state is not None:
        stmt = stmt.where(_a.state == state)
    if before_id is not None:
        stmt = stmt.where(_a.id < before_id)
    async with engine.connect() as conn:
        return list((await conn.execute(stmt.order_by(_a.id.desc()).limit(limit))).mappings().all())


def alert_view(row: Mapping[Any, Any]) -> dict[str, Any]:
    """An alert as the webhook body and the admin API show it."""
    return {"id": int(row["id"]), "kind": row["kind"], "subject": row["subject"], "severity": row["severity"],
            "payload": row["payload"], "at": row["window_start"], "window_until": row["window_end"],
            "suppressed": int(row["suppressed"]), "previous_suppressed": int(row["previous_suppressed"]),
            "last_seen_at": row["last_seen_at"]}
