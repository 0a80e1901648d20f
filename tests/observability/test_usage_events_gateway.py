"""Usage events from real gateway calls over HTTP, through the outbox, to real NATS, RabbitMQ and a webhook.

The acceptance test: 1,000 calls while this test's own nats-server (JetStream, its store in tmp) is stopped
for part of the run; once the calls have returned, every call's event reaches the stream — deduplicated by
event id, exactly one per call (the shared nats-server of the machine is never stopped).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import nats
import nats.errors
import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import create_engine
from hearth.store.tables import request_logs, usage_outbox
from tests.observability.usage_support import AMQP_URL, PrivateNats, WebhookReceiver, eventually, unique
from tests.support import AUTH, chat_body, gateway_registry

EVENT_FIELDS = {"event_type", "event_id", "aggregate_id", "occurred_at", "occurred_at_iso", "caller", "tenant",
                "user", "request_id", "task_id", "provider", "endpoint", "model", "upstream_model", "operation",
                "prompt_tokens", "completion_tokens", "total_tokens", "usage_estimated", "latency_ms", "cost",
                "success", "degraded", "status", "error_code", "metadata"}
FAST_RELAY = {"usage_relay_interval_s": 0.05, "usage_relay_max_backoff_s": 0.5, "usage_relay_timeout_s": 2.0}


def registry(base_url: str) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
                              "api_key": "sk-upstream-a-0123456789"}])


async def count(engine: AsyncEngine, table: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


async def call(http: Any, base_url: str, i: int) -> str:
    r = await http.post(base_url + "/v1/chat/completions", json=chat_body(f"hello {i}"),
                        headers={**AUTH, "X-Hearth-User": f"user-{i % 7}"})
    assert r.status_code == 200, r.text
    return str(r.headers["x-request-id"])


async def test_nothing_configured_writes_no_outbox_row(fake, hearth_server, http, database_url) -> None:
    server = hearth_server(registry(fake.base_url), database_url=database_url)
    for i in range(3):
        await call(http, server.base_url, i)
    engine = create_engine(database_url)
    try:
        async def logged() -> bool:
            return await count(engine, request_logs) == 3

        await eventually(logged, what="3 request-log rows")
        assert await count(engine, usage_outbox) == 0
    finally:
        await engine.dispose()


async def test_calls_reach_a_signed_webhook_and_rabbitmq(fake, hearth_server, http, database_url) -> None:
    receiver = await WebhookReceiver(key="usage-key-0123456789").start()
    queue_name = unique("hearth-usage")
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, exclusive=True)
        server = hearth_server(registry(fake.base_url), database_url=database_url, usage_webhook_url=receiver.url,
                               usage_webhook_signing_key="usage-key-0123456789", callback_url_allow=["127.0.0.1/32"],
                               usage_amqp_url=AMQP_URL, usage_amqp_routing_key=queue_name, **FAST_RELAY)
        ids = [await call(http, server.base_url, i) for i in range(5)]

        async def all_delivered() -> bool:
            return len({e["event_id"] for e in receiver.events()}) == 5 and (
                await queue.declare()).message_count == 5

        await eventually(all_delivered, what="5 events at the webhook and in the queue")
        messages = [await queue.get(no_ack=True, timeout=5) for _ in range(5)]
    finally:
        await connection.close()
        await receiver.stop()
    assert all(receiver.signature_ok(p) for p in receiver.posts)
    hooked = {e["event_id"]: e for e in receiver.events()}
    queued = {m.message_id: orjson.loads(m.body) for m in messages}
    assert hooked == queued  # the same events, by the same ids, at both sinks
    assert sorted(e["request_id"] for e in hooked.values()) == sorted(ids)
    for event in hooked.values():
        assert set(event) == EVENT_FIELDS
        assert (event["caller"], event["provider"], event["model"], event["operation"], event["success"],
                event["degraded"]) == ("tester", "openai-like", "m", "chat", True, False)
        assert event["user"].startswith("user-") and event["prompt_tokens"] > 0 and event["completion_tokens"] > 0
        assert event["total_tokens"] == event["prompt_tokens"] + event["completion_tokens"]
        assert event["latency_ms"] > 0 and event["occurred_at"] > 1_700_000_000_000


async def test_a_capability_request_announces_its_model_calls_not_its_sum(fake, hearth_server, http,
                                                                          database_url) -> None:
    receiver = await WebhookReceiver(key="usage-key-0123456789").start()
    try:
        reg = registry(fake.base_url)
        reg["prices"] = [{"model": "up", "input_per_1m": 1000.0, "output_per_1m": 1000.0}]
        server = hearth_server(reg, database_url=database_url, usage_webhook_url=receiver.url,
                               usage_webhook_signing_key="usage-key-0123456789", callback_url_allow=["127.0.0.1/32"],
                               **FAST_RELAY)
        r = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH,
                            json={"text": "Hearth is a gateway. It governs calls.", "model": "m"})
        assert r.status_code == 200, r.text
        summarized = r.headers["x-request-id"]
        later = await call(http, server.base_url, 1)  # handed over after the capability's rows: a FIFO marker

        async def later_delivered() -> bool:
            return any(e["request_id"] == later for e in receiver.events())

        await eventually(later_delivered, what="the later call's event")
    finally:
        await receiver.stop()
    events = [e for e in {e["event_id"]: e for e in receiver.events()}.values() if e["request_id"] == summarized]
    assert len(events) == 1  # the model call; the capability's own row (its sum) is not announced
    (event,) = events
    assert (event["operation"], event["metadata"]["route"], event["success"]) == ("summarize", "chat", True)
    assert event["cost"] == pytest.approx(r.json()["data"]["cost"]) and event["cost"] > 0


async def test_1000_calls_with_nats_stopped_for_part_of_the_run_deliver_every_event_once_by_id(
        fake, hearth_server, database_url, tmp_path: Path) -> None:
    private = PrivateNats(tmp_path / "nats")
    private.start()
    # No keep-alive: between the phases the server closes idle connections (uvicorn's 5 s keep-alive), and a
    # request sent on one it is closing fails with ReadError — maybe after the server ran it.
    fresh = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=0))
    subject, stream = unique("hearth.usage"), unique("USAGE")
    try:
        nc = await nats.connect(private.url)
        await nc.jetstream().add_stream(name=stream, subjects=[subject])
        await nc.close()
        server = hearth_server(registry(fake.base_url), database_url=database_url, usage_nats_url=private.url,
                               usage_nats_subject=subject, usage_nats_jetstream=True, **FAST_RELAY)
        engine = create_engine(database_url)
        request_ids: list[str] = []
        gate = asyncio.Semaphore(20)

        async def one(i: int) -> None:
            async with gate:
                request_ids.append(await call(fresh, server.base_url, i))

        await asyncio.gather(*(one(i) for i in range(300)))

        async def some_delivered() -> bool:
            async with engine.connect() as conn:
                return bool((await conn.execute(select(func.count()).select_from(usage_outbox)
                                                .where(usage_outbox.c.state == "delivered"))).scalar_one())

        await eventually(some_delivered, what="events delivered before the outage")
        private.stop()
        await asyncio.gather(*(one(i) for i in range(300, 700)))

        async def relay_failed_meanwhile() -> bool:
            async with engine.connect() as conn:
                return bool((await conn.execute(select(func.max(usage_outbox.c.attempts))
                                                .where(usage_outbox.c.state == "pending"))).scalar_one())

        await eventually(relay_failed_meanwhile, what="the relay failing while NATS is down")
        private.start()
        await asyncio.gather(*(one(i) for i in range(700, 1000)))
        assert len(set(request_ids)) == 1000

        events = await read_stream(private.url, stream, subject, want=1000)
        by_id: dict[str, dict[str, Any]] = {}
        for msg_id, event in events:
            assert msg_id == event["event_id"]
            by_id.setdefault(msg_id, event)
        assert len(by_id) == 1000
        assert sorted(e["request_id"] for e in by_id.values()) == sorted(request_ids)  # one event id per call
        assert all(set(e) == EVENT_FIELDS and e["success"] for e in by_id.values())

        async def outbox_done() -> bool:
            async with engine.connect() as conn:
                states = dict((await conn.execute(select(usage_outbox.c.state, func.count())
                                                  .group_by(usage_outbox.c.state))).all())
            return states == {"delivered": 1000}

        await eventually(outbox_done, what="every outbox row marked delivered")
        async with engine.connect() as conn:
            retried = (await conn.execute(select(func.count()).select_from(usage_outbox)
                                          .where(usage_outbox.c.attempts > 1))).scalar_one()
        assert retried > 0  # the outage was real: some events needed more than one try
        await engine.dispose()
    finally:
        await fresh.aclose()
        private.stop()


async def read_stream(url: str, stream: str, subject: str, *, want: int,
                      timeout_s: float = 60.0) -> list[tuple[str, dict[str, Any]]]:
    """Every message of ``stream`` (duplicates included) once it holds ``want`` distinct ids, or after the bound."""
    nc = await nats.connect(url)
    try:
        sub = await nc.jetstream().pull_subscribe(subject, stream=stream)
        out: list[tuple[str, dict[str, Any]]] = []
        ids: set[str] = set()
        deadline = time.monotonic() + timeout_s
        while len(ids) < want and time.monotonic() < deadline:
            try:
                batch = await sub.fetch(500, timeout=1)
            except nats.errors.TimeoutError:
                continue
            for msg in batch:
                msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
                out.append((msg_id, orjson.loads(msg.data)))
                ids.add(msg_id)
                await msg.ack()
        return out
    finally:
        await nc.close()
