"""The escalation webhook: a review item that expires undecided is POSTed, signed, to
``HEARTH_REVIEW_ESCALATION_URL``, durably and with retries, so that somebody hears a decision was not made.

The contract:

* **Never lost, never twice.** The delivery row is written in the transaction that expires the item
  (:func:`schedule`, called by :meth:`hearth.workflows.reviews.ReviewService.expire_due`; one row per item,
  a unique index): whatever crashes, and whether the receiver is up or not, the expiry is recorded with its
  announcement owed. :class:`EscalationSender` claims due rows with a lease (``SKIP LOCKED`` on PostgreSQL),
  so any number of processes deliver each once; a process that dies mid-delivery leaves a lease that lapses.
* **Retries** like task callbacks: a 2xx ends the delivery; anything else (a refusal, a timeout, a 5xx) is
  retried with jittered exponential backoff until ``callback_max_attempts``, then the row is ``gave_up`` —
  kept, and logged as the alert ``review_escalation_gave_up``.
* **Outbound rules of callbacks**: the URL passes the callbacks' address guard (private addresses refused
  unless in ``HEARTH_CALLBACK_URL_ALLOW``) at start and again, the resolved address pinned, before every
  delivery; the body is signed with ``HEARTH_CALLBACK_SIGNING_KEY`` (docs/signing.md), which is therefore
  required — an escalation a receiver cannot authenticate is refused at start, not sent.

The body names the item (``GET /api/v1/reviews/{id}`` shows all of it); its payload and evidence are not
sent. This module owns ``review_escalations``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
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
from hearth.settings import Settings
from hearth.store.db import write_transaction
from hearth.store.tables import review_escalations, review_items
from hearth.tasks.retry import jittered_backoff_s
from hearth.tasks.webhook_post import deliver_until_cancelled, delivery_outcome, post_json

log = get_logger("hearth.reviews.escalations")

EVENT = "review.expired"
_e = review_escalations.c


@dataclass(frozen=True, slots=True)
class EscalationPolicy:
    signing_key: str
    max_attempts: int = 8
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    timeout_s: float = 10.0
    lease_s: float = 30.0


async def schedule(conn: AsyncConnection, review_id: str, url: str, *, now: float) -> None:
    """Owe one announcement of ``review_id``'s expiry, in the caller's transaction."""
    await conn.execute(review_escalations.insert().values(
        review_id=review_id, url=url, state="pending", attempts=0, next_at=now, created_at=now))


async def checked_escalation_url(settings: Settings, guard: AddressGuard) -> str | None:
    """The configured URL once it passed the start-up checks; ``SystemExit`` naming the setting otherwise.

    A host name that does not resolve now is accepted (with a warning): it is checked again before every
    delivery, and an unreachable receiver is what the retries are for."""
    url = settings.review_escalation_url
    if url is None:
        return None
    if not settings.callback_signing_key:
        raise SystemExit("HEARTH_REVIEW_ESCALATION_URL needs HEARTH_CALLBACK_SIGNING_KEY: escalations are signed "
                         "like task callbacks, so the receiver can tell them from forgeries")
    try:
        await guard.check_url(url)
    except HearthError as exc:
        if exc.code == "file_url_refused":
            raise SystemExit(f"HEARTH_REVIEW_ESCALATION_URL is refused: {exc.message.replace('fetch from', 'call')} "
                             "(HEARTH_CALLBACK_URL_ALLOW lists private networks Hearth may call)") from None
        log.warning("review_escalation_url_unresolved", error=exc.code)
    return url


def escalation_body(item: Mapping[str, Any]) -> dict[str, Any]:
    expired_at = next((h.get("at") for h in reversed(item["history"]) if h.get("action") == "expired"), None)
    return {"event": EVENT, "review": {
        "id": item["id"], "queue": item["queue"], "caller": item["caller"], "subject_kind": item["subject_kind"],
        "subject_id": item["subject_id"], "title": item["title"], "state": item["state"],
        "assignee": item["assignee"], "created_at": item["created_at"], "expires_at": item["expires_at"],
        "expired_at": expired_at}}


class EscalationSender:
    """Deliver due escalations; one loop per process where the URL is set, safe in many (rows are leased)."""

    def __init__(self, engine: AsyncEngine, session: aiohttp.ClientSession, policy: EscalationPolicy, *,
                 guard: AddressGuard, clock: Clock = SYSTEM_CLOCK, poll_s: float = 1.0, batch: int = 20) -> None:
        self._engine = engine
        self._session = session
        self._policy = policy
        self._guard = guard
        self._clock = clock
        self._poll_s = poll_s
        self._batch = batch

    async def run(self) -> None:
        """Deliver what is due every ``poll_s`` until cancelled; a failed pass is logged, the next one retries."""
        await deliver_until_cancelled(self.deliver_due, batch=self._batch, poll_s=self._poll_s,
                                      name="review_escalation")

    async def deliveries(self, *, review_id: str | None = None) -> Sequence[Mapping[Any, Any]]:
        stmt = select(review_escalations).order_by(_e.id)
        if review_id is not None:
            stmt = stmt.where(_e.review_id == review_id)
        async with self._engine.connect() as conn:
            return list((await conn.execute(stmt)).mappings().all())

    async def deliver_due(self) -> int:
        """Deliver what is due now; how many deliveries were attempted."""
        now = self._clock.now()
        async with write_transaction(self._engine) as conn:
            due = (((_e.state == "pending") & (_e.next_at <= now))
                   | ((_e.state == "delivering") & (_e.lease_until < now)))
            stmt = select(_e.id, _e.review_id, _e.url, _e.attempts).where(due).order_by(_e.next_at).limit(self._batch)
            if conn.dialect.name == "postgresql":
                stmt = stmt.with_for_update(skip_locked=True)
            rows = (await conn.execute(stmt)).mappings().all()
            if not rows:
                return 0
            await conn.execute(update(review_escalations).where(_e.id.in_([r["id"] for r in rows])).values(
                state="delivering", lease_until=now + self._policy.lease_s))
            items = {r["id"]: r for r in (await conn.execute(select(review_items).where(
                review_items.c.id.in_({r["review_id"] for r in rows})))).mappings().all()}
        await asyncio.gather(*(self._deliver(r, items.get(r["review_id"])) for r in rows))
        return len(rows)

    async def _deliver(self, row: Mapping[Any, Any], item: Mapping[Any, Any] | None) -> None:
        status: int | None = None
        error: str | None = None
        if item is None:
            error = "review_not_found"
        else:
            try:
                status = await self._post(row["url"], orjson.dumps(escalation_body(item)), delivery_id=int(row["id"]))
            except HearthError as exc:
                error = exc.code
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                error = type(exc).__name__
        attempts = int(row["attempts"]) + 1
        values = delivery_outcome(attempts=attempts, status=status, error=error, now=self._clock.now(),
                                  max_attempts=self._policy.max_attempts, retry_in_s=jittered_backoff_s(
                                      attempts, base_s=self._policy.base_delay_s, max_s=self._policy.max_delay_s))
        if values["state"] == "gave_up":
            log.warning("review_escalation_gave_up", review_id=row["review_id"], attempts=attempts, status=status,
                        error=error, alert=True)
        async with write_transaction(self._engine) as conn:
            await conn.execute(update(review_escalations).where(_e.id == row["id"], _e.state == "delivering")
                               .values(**values))

    async def _post(self, url: str, body: bytes, *, delivery_id: int) -> int:
        target = await self._guard.check_url(url)
        async with post_json(self._session, target, body, delivery_id=f"esc-{delivery_id}", event=EVENT,
                             signing_key=self._policy.signing_key, timeout_s=self._policy.timeout_s) as resp:
            await resp.read()
            return resp.status


def build_sender(settings: Settings, engine: AsyncEngine, session: aiohttp.ClientSession, *,
                 guard: AddressGuard) -> EscalationSender | None:
    """The process's sender, when an escalation URL is configured (checked by :func:`checked_escalation_url`)."""
    if settings.review_escalation_url is None or not settings.callback_signing_key:
        return None
    policy = EscalationPolicy(signing_key=settings.callback_signing_key, max_attempts=settings.callback_max_attempts)
    return EscalationSender(engine, session, policy, guard=guard)
