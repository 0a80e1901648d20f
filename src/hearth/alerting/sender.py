"""The alert sender: due alerts POSTed, signed, to the alert URL — retried with backoff, given up after
``max_attempts`` (kept, listed by ``GET /api/v1/admin/alerts``, logged as ``alert_gave_up``).

The same delivery rules as task callbacks and review escalations: rows leased from the alert log
(:func:`hearth.observability.alerts.claim_due`, so any number of processes deliver each alert once), the URL
checked by the address guard with the resolved address pinned before every POST, the body signed with the
callback key (:func:`hearth.tasks.webhook_post.post_json`), each outcome recorded by
:func:`hearth.tasks.webhook_post.delivery_outcome`.

Body: ``{"event": "alert", "alert": {id, kind, subject, severity, payload, at, window_until, suppressed,
previous_suppressed, last_seen_at}}``; headers ``X-Hearth-Event: alert.<kind>`` and
``X-Hearth-Delivery: alert-<id>`` (the receiver's deduplication key: a retry repeats it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.alerting.config import AlertConfig
from hearth.capabilities.address_guard import AddressGuard
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.observability import alerts
from hearth.observability.logging import get_logger
from hearth.tasks.retry import jittered_backoff_s
from hearth.tasks.webhook_post import deliver_until_cancelled, delivery_outcome, post_json

log = get_logger("hearth.alerting.sender")


class AlertSender:
    """Deliver due alerts; one loop per process where alerts are on, safe in many (rows are leased)."""

    def __init__(self, engine: AsyncEngine, session: aiohttp.ClientSession, config: AlertConfig, *, guard: AddressGuard,
                 clock: Clock = SYSTEM_CLOCK, poll_s: float = 1.0, batch: int = 20) -> None:
        self._engine = engine
        self._session = session
        self._config = config
        self._guard = guard
        self._clock = clock
        self._poll_s = poll_s
        self._batch = batch

    async def run(self) -> None:
        """Deliver what is due every ``poll_s`` until cancelled; a failed pass is logged, the next one retries."""
        await deliver_until_cancelled(self.deliver_due, batch=self._batch, poll_s=self._poll_s, name="alert")

    async def deliver_due(self) -> int:
        """Deliver what is due now; how many deliveries were attempted."""
        rows = await alerts.claim_due(self._engine, now=self._clock.now(), lease_s=self._config.lease_s,
                                      limit=self._batch)
        await asyncio.gather(*(self._deliver(r) for r in rows))
        return len(rows)

    async def _deliver(self, row: Mapping[Any, Any]) -> None:
        status: int | None = None
        error: str | None = None
        event = f"alert.{row['kind']}"
        body = orjson.dumps({"event": "alert", "alert": alerts.alert_view(row)})
        try:
            target = await self._guard.check_url(self._config.url)
            async with post_json(self._session, target, body, delivery_id=f"alert-{row['id']}", event=event,
                                 signing_key=self._config.signing_key, timeout_s=self._config.timeout_s) as resp:
                await resp.read()
                status = resp.status
        except HearthError as exc:
            error = exc.code
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            error = type(exc).__name__
        attempts = int(row["attempts"]) + 1
        c = self._config
        values = delivery_outcome(attempts=attempts, status=status, error=error, now=self._clock.now(),
                                  max_attempts=c.max_attempts,
                                  retry_in_s=jittered_backoff_s(attempts, base_s=c.base_delay_s, max_s=c.max_delay_s))
        if values["state"] == "gave_up":
            log.warning("alert_gave_up", alert_id=int(row["id"]), kind=row["kind"], attempts=attempts, status=status,
                        error=error, alert=True)
        await alerts.finish(self._engine, int(row["id"]), values)
