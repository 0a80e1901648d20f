"""One signed JSON POST to an address-guarded URL: what task callbacks, the ``http_post`` task type and the
review escalation webhook send.

The guard has already resolved and checked the URL (:class:`~hearth.capabilities.address_guard.CheckedTarget`);
the request goes to the address it checked (pinned, so a DNS answer that changes between the check and the
connection cannot redirect it), with the original ``Host`` and TLS server name, never following redirects.
The receiver verifies ``X-Hearth-Signature`` over the original URL (docs/signing.md) and deduplicates by
``X-Hearth-Delivery``, which a retry of the same delivery repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp

from hearth.auth.signing import signed_headers
from hearth.capabilities.address_guard import CheckedTarget
from hearth.observability.logging import get_logger

__all__ = ["deliver_until_cancelled", "delivery_outcome", "post_json"]

log = get_logger("hearth.webhooks")


async def deliver_until_cancelled(deliver_due: Callable[[], Awaitable[int]], *, batch: int, poll_s: float,
                                  name: str) -> None:
    """The loop of a durable sender (review escalations, alerts): ``deliver_due`` every ``poll_s``, and again at once
    while it filled a whole ``batch``, until cancelled; a failed pass is logged as ``<name>_loop_failed`` and the
    next one retries."""
    while True:
        try:
            while await deliver_due() == batch:
                pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(f"{name}_loop_failed", error=type(exc).__name__)
        await asyncio.sleep(poll_s)


@contextlib.asynccontextmanager
async def post_json(session: aiohttp.ClientSession, target: CheckedTarget, body: bytes, *, delivery_id: str,
                    event: str | None, signing_key: str | None, timeout_s: float
                    ) -> AsyncIterator[aiohttp.ClientResponse]:
    """POST ``body`` (JSON) to ``target``; the response, open for the ``async with`` block.

    Signed when ``signing_key`` is set. Network failures and the timeout raise as aiohttp does
    (``aiohttp.ClientError``, ``TimeoutError``); the caller decides what each means for its retries."""
    headers = {"Content-Type": "application/json", "Host": target.host_header, "X-Hearth-Delivery": delivery_id}
    if event:
        headers["X-Hearth-Event"] = event
    if signing_key:
        headers.update(signed_headers(signing_key, "POST", str(target.url), body))
    async with session.post(target.pinned_url(target.addresses[0]), data=body, headers=headers,
                            timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False,
                            server_hostname=target.server_hostname) as resp:
        yield resp


def delivery_outcome(*, attempts: int, status: int | None, error: str | None, now: float, max_attempts: int,
                     retry_in_s: float) -> dict[str, Any]:
    """What a durable delivery's row becomes after its ``attempts``-th POST: ``delivered`` on a 2xx, ``gave_up``
    once ``max_attempts`` are spent (the row is kept), else ``pending`` again ``retry_in_s`` from ``now``."""
    values: dict[str, Any] = {"attempts": attempts, "last_status": status, "last_error": error, "lease_until": None}
    if status is not None and 200 <= status < 300:
        values.update(state="delivered", delivered_at=now)
    elif attempts >= max_attempts:
        values.update(state="gave_up")
    else:
        values.update(state="pending", next_at=now + retry_in_s)
    return values
