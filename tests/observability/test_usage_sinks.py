"""Usage-event sinks driven by the relay, against real receivers: an aiohttp webhook on 127.0.0.1, the machine's
NATS (core and JetStream) and RabbitMQ servers — unique subjects, streams and queues per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import aiohttp
import nats
import orjson
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.observability.usage_outbox import UsageOutboxWriter
from hearth.store.tables import usage_outbox
from hearth.testing.fake_clock import FakeClock
from hearth.usage.relay import RelayPolicy, UsageRelay
from hearth.usage.sinks import AmqpSink, NatsSink, UsageSink, WebhookSink
from tests.observability.usage_support import (
    AMQP_URL,
    SHARED_NATS_URL,
    WebhookReceiver,
    eventually,
    free_port,
    record,
    unique,
)

KEY = "usage-signing-key-0123456789"
NOW = 1_000_000.0


async def outbox(engine: AsyncEngine, sink: str | None = None) -> list[dict[str, Any]]:
    stmt = select(usage_outbox).order_by(usage_outbox.c.id)
    if sink is not None:
        stmt = stmt.where(usage_outbox.c.sink == sink)
    async with engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(stmt)).mappings()]


async def write_events(engine: AsyncEngine, sinks: list[str], n: int, clock: FakeClock | None = None) -> None:
    writer = UsageOutboxWriter(engine, sinks, {"a": "openai-like"}.get, clock=clock or FakeClock(NOW))
    writer.add([record(i) for i in range(n)])
    assert await writer.flush()


def relay(engine: AsyncEngine, *sinks: UsageSink, clock: FakeClock | None = None, batch: int = 100) -> UsageRelay:
    return UsageRelay(engine, sinks, RelayPolicy(batch=batch, interval_s=0.05, max_backoff_s=0.2, timeout_s=5.0),
                      clock=clock or FakeClock(NOW))


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    r = await WebhookReceiver(key=KEY).start()
    yield r
    await r.stop()


def webhook(session: aiohttp.ClientSession, receiver: WebhookReceiver) -> WebhookSink:
    return WebhookSink(session, receiver.url, signing_key=KEY, guard=AddressGuard(["127.0.0.1/32"]), timeout_s=5.0)


async def test_webhook_gets_signed_batches_of_every_event_with_all_fields(engine, session, receiver) -> None:
    await write_events(engine, ["webhook"], 5)
    r = relay(engine, webhook(session, receiver), batch=3)
    assert (await r.relay_once(r.sinks[0])).sent == 3
    assert (await r.relay_once(r.sinks[0])).sent == 2
    assert len(receiver.posts) == 2 and all(receiver.signature_ok(p) for p in receiver.posts)
    assert {p["headers"]["X-Hearth-Event"] for p in receiver.posts} == {"AIUsageRecorded"}
    assert len({p["headers"]["X-Hearth-Delivery"] for p in receiver.posts}) == 2
    rows = await outbox(engine)
    assert receiver.events() == [orjson.loads(row["payload"]) for row in rows]
    assert [e["request_id"] for e in receiver.events()] == [f"req-{i}" for i in range(5)]
    assert all(row["state"] == "delivered" and row["attempts"] == 1 for row in rows)


async def test_a_refused_webhook_batch_stays_owed_until_the_receiver_takes_it(engine, session, receiver) -> None:
    clock = FakeClock(NOW)
    await write_events(engine, ["webhook"], 2, clock)
    receiver.status = 503
    r = relay(engine, webhook(session, receiver), clock=clock)
    assert (await r.relay_once(r.sinks[0])).failed == 2
    rows = await outbox(engine)
    assert [(x["state"], x["attempts"], x["last_error"]) for x in rows] == [("pending", 1, "HTTP 503")] * 2
    assert (await r.relay_once(r.sinks[0])).sent == 0  # backing off
    receiver.status = 200
    clock.advance(1.0)
    assert (await r.relay_once(r.sinks[0])).failed == 0
    assert [(x["state"], x["attempts"]) for x in await outbox(engine)] == [("delivered", 2)] * 2
    assert sorted(e["request_id"] for e in receiver.events()) == ["req-0", "req-1"]


async def test_nats_core_publishes_each_event_with_its_id_as_nats_msg_id(engine) -> None:
    subject = unique("hearth.test.usage")
    nc = await nats.connect(SHARED_NATS_URL)
    try:
        sub = await nc.subscribe(subject)
        await nc.flush()
        await write_events(engine, ["nats"], 3)
        r = relay(engine, NatsSink(SHARED_NATS_URL, subject, jetstream=False, timeout_s=5.0))
        try:
            assert (await r.relay_once(r.sinks[0])).failed == 0
        finally:
            await r.stop()
        got = [await sub.next_msg(timeout=5) for _ in range(3)]
    finally:
        await nc.close()
    rows = await outbox(engine)
    assert [(m.headers or {}).get("Nats-Msg-Id") for m in got] == [row["event_id"] for row in rows]
    assert [orjson.loads(m.data) for m in got] == [orjson.loads(row["payload"]) for row in rows]
    assert all(row["state"] == "delivered" for row in rows)


async def test_nats_jetstream_acknowledges_and_drops_a_resent_id(engine) -> None:
    subject, stream = unique("hearth.test.usage"), unique("HEARTH_USAGE")
    nc = await nats.connect(SHARED_NATS_URL)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[subject])
    try:
        await write_events(engine, ["nats"], 4)
        r = relay(engine, NatsSink(SHARED_NATS_URL, subject, jetstream=True, timeout_s=5.0))
        try:
            assert (await r.relay_once(r.sinks[0])).failed == 0
            async with engine.begin() as conn:  # as if a relay died after publishing: the rows are owed again
                await conn.execute(update(usage_outbox).values(state="pending"))
            assert (await r.relay_once(r.sinks[0])).failed == 0
        finally:
            await r.stop()
        info = await js.stream_info(stream)
        assert info.state.messages == 4  # the resent ids were dropped by the stream's duplicate window
        msgs = [await js.get_msg(stream, seq) for seq in range(1, 5)]
    finally:
        await js.delete_stream(stream)
        await nc.close()
    rows = await outbox(engine)
    assert [(m.headers or {}).get("Nats-Msg-Id") for m in msgs] == [row["event_id"] for row in rows]
    assert [orjson.loads(m.data or b"") for m in msgs] == [orjson.loads(row["payload"]) for row in rows]


async def test_amqp_publishes_confirmed_persistent_messages_with_the_event_id(engine) -> None:
    exchange_name, queue_name = unique("hearth.test.usage"), unique("hearth-usage")
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(exchange_name, aio_pika.ExchangeType.DIRECT, auto_delete=True)
        queue = await channel.declare_queue(queue_name, exclusive=True)
        await queue.bind(exchange, routing_key="usage")
        await write_events(engine, ["amqp"], 3)
        r = relay(engine, AmqpSink(AMQP_URL, exchange_name, "usage", timeout_s=5.0))
        try:
            assert (await r.relay_once(r.sinks[0])).failed == 0
        finally:
            await r.stop()
        got = []
        for _ in range(3):
            message = await queue.get(no_ack=True, timeout=5)
            assert message is not None
            got.append(message)
        await exchange.delete()
    finally:
        await connection.close()
    rows = await outbox(engine)
    assert [m.message_id for m in got] == [row["event_id"] for row in rows]
    assert [orjson.loads(m.body) for m in got] == [orjson.loads(row["payload"]) for row in rows]
    assert {(m.type, m.content_type, m.delivery_mode) for m in got} == {
        ("AIUsageRecorded", "application/json", aio_pika.DeliveryMode.PERSISTENT)}


async def test_an_amqp_event_no_queue_takes_is_not_counted_as_delivered(engine) -> None:
    await write_events(engine, ["amqp"], 2)
    r = relay(engine, AmqpSink(AMQP_URL, "", unique("no-such-queue"), timeout_s=5.0))
    try:
        assert (await r.relay_once(r.sinks[0])).failed == 2
    finally:
        await r.stop()
    assert {(x["state"], x["attempts"]) for x in await outbox(engine)} == {("pending", 1)}


async def test_a_sink_that_is_down_holds_back_only_its_own_rows(engine, session, receiver) -> None:
    queue_name = unique("hearth-usage")
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, exclusive=True)
        await write_events(engine, ["webhook", "nats", "amqp"], 30)
        r = UsageRelay(engine, [webhook(session, receiver),
                                NatsSink(f"nats://127.0.0.1:{free_port()}", "nobody", jetstream=False, timeout_s=1.0),
                                AmqpSink(AMQP_URL, "", queue_name, timeout_s=5.0)],
                       RelayPolicy(batch=10, interval_s=0.05, max_backoff_s=0.2, timeout_s=5.0))
        r.start()
        try:
            async def others_delivered_and_nats_tried() -> bool:
                rows = await outbox(engine)
                return all(x["state"] == "delivered" for x in rows if x["sink"] != "nats") and any(
                    x["attempts"] >= 1 for x in rows if x["sink"] == "nats")

            await eventually(others_delivered_and_nats_tried, what="webhook and amqp rows delivered, nats tried")
        finally:
            await r.stop()
        assert (await queue.declare()).message_count == 30
    finally:
        await connection.close()
    nats_rows = await outbox(engine, "nats")
    assert not any(x["state"] == "delivered" for x in nats_rows)
    assert any(x["attempts"] >= 1 and x["last_error"] for x in nats_rows) and r.stats()["nats"]["failures"] >= 1
    assert len({e["event_id"] for e in receiver.events()}) == 30


async def test_two_relays_share_the_outbox_and_send_each_event_once(engine) -> None:
    queue_name = unique("hearth-usage")
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, exclusive=True)
        await write_events(engine, ["amqp"], 200)
        relays = [UsageRelay(engine, [AmqpSink(AMQP_URL, "", queue_name, timeout_s=5.0)],
                             RelayPolicy(batch=10, interval_s=0.05, max_backoff_s=0.2, timeout_s=5.0))
                  for _ in range(2)]
        for r in relays:
            r.start()
        try:
            async def all_delivered() -> bool:
                return all(x["state"] == "delivered" for x in await outbox(engine))

            await eventually(all_delivered, what="200 events delivered")
        finally:
            for r in relays:
                await r.stop()
        assert all(r.stats()["amqp"]["delivered"] > 0 for r in relays)  # both took part
        got = [await queue.get(no_ack=True, timeout=5) for _ in range(200)]
        assert (await queue.declare()).message_count == 0
    finally:
        await connection.close()
    assert sorted(m.message_id or "" for m in got) == sorted(x["event_id"] for x in await outbox(engine))
