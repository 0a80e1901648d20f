"""Where usage events go: a signed webhook, NATS, RabbitMQ — each told apart from a duplicate by the event id.

A sink sends a batch of outbox rows and says, per row, whether it is delivered (``None``) or why not (a
short error name, kept on the row). Delivered means the receiver acknowledged it:

* **webhook** — one signed POST per batch (``{"event": "AIUsageRecorded", "events": [...]}``), signed and
  address-guarded exactly like task callbacks (:mod:`hearth.tasks.webhook_post`); a 2xx delivers the whole
  batch. ``X-Hearth-Delivery`` is derived from the batch's event ids; receivers deduplicate by ``event_id``.
* **nats** — each event published on the subject with the header ``Nats-Msg-Id: <event id>``. With
  JetStream the publish acknowledgement confirms it was stored (and the stream drops a duplicate id within
  its duplicate window); with core NATS a flush confirms the server received it (core NATS keeps nothing
  for a subscriber that is away: use JetStream where every event must arrive).
* **amqp** — each event published with ``message_id = <event id>``, persistent, ``mandatory`` and under
  publisher confirms: an event no queue takes is returned and counts as not delivered.

Connections are opened lazily and opened again after a failure; nothing is sent when a sink is not
configured. The NATS and RabbitMQ clients are imported by the sink that uses them, when it first connects:
a process without those sinks does not load them (about 4 MB and 60 modules).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.observability.usage_events import EVENT_TYPE
from hearth.observability.usage_outbox import OutboxRow
from hearth.tasks.webhook_post import post_json

if TYPE_CHECKING:
    from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange
    from nats.aio.client import Client as NatsClient
    from nats.js import JetStreamContext

log = get_logger("hearth.usage.sinks")

Outcome = str | None  # None: delivered; else why not


class UsageSink(Protocol):
    name: str  # webhook | nats | amqp: the outbox rows it owns

    async def send(self, rows: Sequence[OutboxRow]) -> list[Outcome]:
        """Deliver ``rows``; one outcome per row, in order. Never raises for a delivery failure."""
        ...

    async def close(self) -> None: ...


def _error_name(exc: BaseException) -> str:
    return type(exc).__name__ + (f": {exc}"[:200] if str(exc) else "")


class WebhookSink:
    name = "webhook"

    def __init__(self, session: aiohttp.ClientSession, url: str, *, signing_key: str, guard: AddressGuard,
                 timeout_s: float) -> None:
        self._session = session
        self._url = url
        self._key = signing_key
        self._guard = guard
        self._timeout_s = timeout_s

    async def send(self, rows: Sequence[OutboxRow]) -> list[Outcome]:
        if not rows:
            return []
        body = ('{"event":"' + EVENT_TYPE + '","events":[' + ",".join(r.payload for r in rows) + "]}").encode()
        delivery = hashlib.sha256("\n".join(r.event_id for r in rows).encode()).hexdigest()[:32]
        outcome: Outcome
        try:
            target = await self._guard.check_url(self._url)
            async with post_json(self._session, target, body, delivery_id=delivery, event=EVENT_TYPE,
                                 signing_key=self._key, timeout_s=self._timeout_s) as resp:
                await resp.read()
                outcome = None if 200 <= resp.status < 300 else f"HTTP {resp.status}"
        except HearthError as exc:
            outcome = exc.code
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            outcome = _error_name(exc)
        return [outcome] * len(rows)

    async def close(self) -> None:
        return None  # the session is the runtime's


async def _ignore(*_: Any) -> None:
    return None


class NatsSink:
    name = "nats"

    def __init__(self, url: str, subject: str, *, jetstream: bool, timeout_s: float) -> None:
        self._url = url
        self._subject = subject
        self._jetstream = jetstream
        self._timeout_s = timeout_s
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None

    async def _client(self) -> NatsClient:
        nc = self._nc
        if nc is None or nc.is_closed:
            import nats

            # Two tries (nats-py counts 0 as unlimited), no reconnection of its own: a connection that fails or
            # drops is opened again next round.
            nc = await nats.connect(servers=[self._url], connect_timeout=min(self._timeout_s, 5.0),
                                    allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.1,
                                    error_cb=_ignore, disconnected_cb=_ignore, reconnected_cb=_ignore,
                                    closed_cb=_ignore, name="hearth-usage-relay")
            self._nc, self._js = nc, nc.jetstream(timeout=self._timeout_s)
        return nc

    async def send(self, rows: Sequence[OutboxRow]) -> list[Outcome]:
        if not rows:
            return []
        try:
            nc = await self._client()
        except Exception as exc:  # nats-py raises its own errors and OSError alike for a server that is away
            await self._drop()
            return [_error_name(exc)] * len(rows)
        if self._jetstream:
            assert self._js is not None
            js = self._js
            results = await asyncio.gather(*(js.publish(self._subject, r.payload.encode(),
                                                        headers={"Nats-Msg-Id": r.event_id})
                                             for r in rows), return_exceptions=True)
            return [_error_name(x) if isinstance(x, BaseException) else None for x in results]
        try:
            for r in rows:
                await nc.publish(self._subject, r.payload.encode(), headers={"Nats-Msg-Id": r.event_id})
            await nc.flush(timeout=max(1, int(self._timeout_s)))
        except Exception as exc:
            return [_error_name(exc)] * len(rows)
        return [None] * len(rows)

    async def _drop(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except Exception as exc:
                log.debug("nats_close_failed", error=type(exc).__name__)

    async def close(self) -> None:
        await self._drop()


class AmqpSink:
    name = "amqp"

    def __init__(self, url: str, exchange: str, routing_key: str, *, timeout_s: float) -> None:
        self._url = url
        self._exchange_name = exchange
        self._routing_key = routing_key
        self._timeout_s = timeout_s
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None

    async def _open(self) -> AbstractExchange:
        if self._exchange is not None and self._channel is not None and not self._channel.is_closed:
            return self._exchange
        await self._drop()
        import aio_pika

        self._connection = await aio_pika.connect(self._url, timeout=self._timeout_s)
        self._channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        self._exchange = (self._channel.default_exchange if not self._exchange_name
                          else await self._channel.get_exchange(self._exchange_name, ensure=True))
        return self._exchange

    async def send(self, rows: Sequence[OutboxRow]) -> list[Outcome]:
        if not rows:
            return []
        try:
            exchange = await self._open()
        except Exception as exc:  # refused connection, bad credentials, a missing exchange: retried later
            await self._drop()
            return [_error_name(exc)] * len(rows)
        from aio_pika import DeliveryMode, Message

        results = await asyncio.gather(*(exchange.publish(
            Message(r.payload.encode(), message_id=r.event_id, type=EVENT_TYPE,
                             content_type="application/json", delivery_mode=DeliveryMode.PERSISTENT),
            routing_key=self._routing_key, mandatory=True, timeout=self._timeout_s) for r in rows),
            return_exceptions=True)
        outcomes = [_error_name(x) if isinstance(x, BaseException) else None for x in results]
        if any(o is not None for o in outcomes) and (self._channel is None or self._channel.is_closed):
            await self._drop()
        return outcomes

    async def _drop(self) -> None:
        connection, self._connection, self._channel, self._exchange = self._connection, None, None, None
        if connection is not None and not connection.is_closed:
            try:
                await connection.close()
            except Exception as exc:
                log.debug("amqp_close_failed", error=type(exc).__name__)

    async def close(self) -> None:
        await self._drop()
