"""Callbacks: a signed POST to a task's ``callback_url`` once it reaches a terminal state.

A delivery row is written in the transaction that ends the task (:func:`schedule`), so no terminal
state is ever announced twice or forgotten. :class:`CallbackSender` (run by every worker) claims due
deliveries with a short lease, POSTs the task as ``GET /api/v1/ai/tasks/{id}`` shows it, and records
the answer: a 2xx ends the delivery, anything else is retried with exponential backoff until
``max_attempts``, after which it is ``gave_up`` — listed by the API and redeliverable by an operator.

Callbacks *notify*; the task itself is the truth. A receiver that missed one reconciles with
``GET /api/v1/ai/tasks?updated_since=…``.

**Signature.** The body is signed with the request-signing scheme (docs/signing.md) under the
operator's callback key: ``X-Timestamp``, ``X-Nonce``, ``X-Signature`` over
``POST\\n<path?query>\\n<sha256(body)>\\n<timestamp>\\n<nonce>``. A receiver checks it with
``hearth.auth.signing.verify`` semantics (or any HMAC-SHA256 implementation) and refuses old timestamps
and repeated nonces.

**SSRF.** The URL is checked when the task is submitted and again, with the resolved address pinned,
before every delivery (:class:`hearth.capabilities.address_guard.AddressGuard`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.store.db import write_transaction
from hearth.store.tables import callback_deliveries, tasks
from hearth.tasks.retry import jittered_backoff_s
from hearth.tasks.webhook_post import delivery_outcome, post_json

log = get_logger("hearth.tasks.callbacks")

DELIVERY_STATES = ("pending", "delivering", "delivered", "gave_up")


@dataclass(frozen=True, slots=True)
class CallbackPolicy:
    signing_key: str | None
    max_attempts: int = 8
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    timeout_s: float = 10.0
    lease_s: float = 30.0


async def schedule(conn: AsyncConnection, finished: Sequence[tuple[str, str, str]], *, now: float) -> None:
    """A pending delivery per (task id, url, terminal state)."""
    if finished:
        await conn.execute(callback_deliveries.insert(), [
            {"task_id": task_id, "url": url, "state": "pending", "task_state": state, "attempts": 0,
             "next_at": now, "created_at": now} for task_id, url, state in finished])


async def check_callback_url(guard: AddressGuard, url: str) -> None:
    """Refuse a callback URL the guard refuses (400 ``callback_url_refused`` with the guard's reason)."""
    try:
        await guard.check_url(url)
    except HearthError as exc:
        if exc.code == "file_url_refused":
            raise HearthError("callback_url_refused", exc.message.replace("fetch from", "call"),
                              details=exc.details, param="callback_url") from None
        raise HearthError("callback_url_refused", "The callback URL's host cannot be resolved.",
                          details=exc.details, param="callback_url") from None


def backoff_s(attempts: int, policy: CallbackPolicy) -> float:
    return jittered_backoff_s(attempts, base_s=policy.base_delay_s, max_s=policy.max_delay_s)


async def redeliver(conn: AsyncConnection, task_id: str, *, now: float) -> int:
    """Make the task's undelivered (or given-up) deliveries due again; how many."""
    result = await conn.execute(update(callback_deliveries).where(
        callback_deliveries.c.task_id == task_id, callback_deliveries.c.state.in_(("gave_up", "pending")))
        .values(state="pending", next_at=now, attempts=0))
    return int(result.rowcount or 0)


async def listing(conn: AsyncConnection, *, state: str | None, task_id: str | None, after_id: int | None,
                  limit: int) -> Sequence[Mapping[Any, Any]]:
    t = callback_deliveries
    stmt = select(t.c.id, t.c.task_id, t.c.url, t.c.state, t.c.task_state, t.c.attempts, t.c.next_at,
                  t.c.last_status, t.c.last_error, t.c.created_at, t.c.delivered_at)
    if state:
        stmt = stmt.where(t.c.state == state)
    if task_id:
        stmt = stmt.where(t.c.task_id == task_id)
    if after_id is not None:
        stmt = stmt.where(t.c.id > after_id)
    return list((await conn.execute(stmt.order_by(t.c.id).limit(limit))).mappings().all())


TaskView = Callable[[Mapping[Any, Any]], dict[str, Any]]


class CallbackSender:
    """Deliver due callbacks; one loop per worker process, safe to run in many (deliveries are leased)."""

    def __init__(self, engine: AsyncEngine, session: aiohttp.ClientSession, policy: CallbackPolicy, *,
                 guard: AddressGuard, view: TaskView, clock: Clock = SYSTEM_CLOCK, poll_s: float = 1.0,
                 batch: int = 20) -> None:
        self._engine = engine
        self._session = session
        self._policy = policy
        self._guard = guard
        self._view = view
        self._clock = clock
        self._poll_s = poll_s
        self._batch = batch
        self._task: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="task-callbacks")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self._poll_s)
            self.wake.clear()
            try:
                while await self.deliver_due() == self._batch:
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("callback_loop_failed", error=type(exc).__name__)

    async def deliver_due(self) -> int:
        """Deliver what is due now; how many deliveries were attempted."""
        now = self._clock.now()
        t = callback_deliveries
        async with write_transaction(self._engine) as conn:
            due = (t.c.state == "pending") & (t.c.next_at <= now) | \
                  (t.c.state == "delivering") & (t.c.lease_until < now)
            stmt = (select(t.c.id, t.c.task_id, t.c.url, t.c.attempts, t.c.task_state).where(due)
                    .order_by(t.c.next_at).limit(self._batch))
            if conn.dialect.name == "postgresql":
                stmt = stmt.with_for_update(skip_locked=True)
            rows = (await conn.execute(stmt)).mappings().all()
            if rows:
                await conn.execute(update(t).where(t.c.id.in_([r["id"] for r in rows])).values(
                    state="delivering", lease_until=now + self._policy.lease_s))
                views = {r["id"]: r for r in (await conn.execute(
                    select(tasks).where(tasks.c.id.in_({r["task_id"] for r in rows})))).mappings().all()}
        if not rows:
            return 0
        await asyncio.gather(*(self._deliver(r, views.get(r["task_id"])) for r in rows))
        return len(rows)

    async def _deliver(self, row: Mapping[Any, Any], task: Mapping[Any, Any] | None) -> None:
        status: int | None = None
        error: str | None = None
        if task is None:
            error = "task_not_found"
        else:
            event = "dead_letter.opened" if row["task_state"] == "dead_letter" else "task.finished"
            body = orjson.dumps({"event": event, "task": self._view(task)})
            try:
                status = await self._post(row["url"], body, delivery_id=int(row["id"]), event=event)
            except HearthError as exc:
                error = exc.code
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                error = type(exc).__name__
        attempts = int(row["attempts"]) + 1
        values = delivery_outcome(attempts=attempts, status=status, error=error, now=self._clock.now(),
                                  max_attempts=self._policy.max_attempts, retry_in_s=backoff_s(attempts, self._policy))
        if values["state"] == "gave_up":
            log.warning("callback_gave_up", task_id=row["task_id"], attempts=attempts, status=status, error=error)
        async with write_transaction(self._engine) as conn:
            await conn.execute(update(callback_deliveries).where(
                callback_deliveries.c.id == row["id"], callback_deliveries.c.state == "delivering").values(**values))

    async def _post(self, url: str, body: bytes, *, delivery_id: int, event: str) -> int:
        target = await self._guard.check_url(url)
        async with post_json(self._session, target, body, delivery_id=str(delivery_id), event=event,
                             signing_key=self._policy.signing_key, timeout_s=self._policy.timeout_s) as resp:
            await resp.read()
            return resp.status
