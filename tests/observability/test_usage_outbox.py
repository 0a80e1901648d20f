"""The usage-event outbox on real SQLite and PostgreSQL: rows per event and sink, leases, backoff, retention."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.observability.request_log import RequestLogWriter
from hearth.observability.usage_outbox import (
    UsageOutboxWriter,
    backlog,
    claim_due,
    delete_delivered,
    mark_delivered,
    mark_failed,
)
from hearth.settings import Settings
from hearth.store.tables import request_logs, usage_outbox
from hearth.testing.fake_clock import FakeClock
from hearth.usage.relay import RelayPolicy, UsageRelay
from hearth.usage.setup import build_usage_events, configured_sinks
from tests.observability.usage_support import record

PROVIDERS = {"a": "openai-like"}


def writer(engine: AsyncEngine, sinks: list[str], clock: FakeClock | None = None) -> UsageOutboxWriter:
    return UsageOutboxWriter(engine, sinks, PROVIDERS.get, clock=clock or FakeClock(1_000_000.0))


async def outbox_rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [dict(r) for r in (await conn.execute(select(usage_outbox).order_by(usage_outbox.c.id))).mappings()]


async def test_one_row_per_sink_for_each_gateway_call_with_every_field(engine: AsyncEngine) -> None:
    w = writer(engine, ["webhook", "nats", "amqp"])
    w.add([record(1, task_id="task-9", fallback_used=True),
           record(2, route="capability", capability="summarize"),  # the capability's sum of calls: no event
           record(3, endpoint=None, status=503, error_code="endpoint_busy", prompt_tokens=0, completion_tokens=0)])
    assert await w.flush()
    rows = await outbox_rows(engine)
    assert [(r["sink"], r["state"], r["attempts"]) for r in rows] == [
        ("webhook", "pending", 0), ("nats", "pending", 0), ("amqp", "pending", 0)] * 2
    assert len({r["event_id"] for r in rows[:3]}) == 1 and rows[0]["event_id"] != rows[3]["event_id"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", rows[0]["event_id"])
    first, failed = orjson.loads(rows[0]["payload"]), orjson.loads(rows[3]["payload"])
    assert first == {
        "event_type": "AIUsageRecorded", "event_id": rows[0]["event_id"], "aggregate_id": "task-9",
        "occurred_at": 1_796_284_800_001, "occurred_at_iso": "2026-12-03T08:00:00.001000+00:00",
        "caller": "tester", "tenant": "t", "user": "u", "request_id": "req-1", "task_id": "task-9",
        "provider": "openai-like", "endpoint": "a", "model": "m", "upstream_model": "up", "operation": "chat",
        "prompt_tokens": 11, "completion_tokens": 20, "total_tokens": 31, "usage_estimated": False,
        "latency_ms": 12.5, "cost": 0.001, "success": True, "degraded": True, "status": 200, "error_code": None,
        "metadata": {"route": "chat", "stream": False, "scene": None, "attempts": 1, "prompt_code": None,
                     "prompt_version": None}}
    assert (failed["success"], failed["provider"], failed["error_code"], failed["degraded"], failed["total_tokens"]) \
        == (False, None, "endpoint_busy", False, 0)
    assert w.stats()["events"] == 2 and w.stats()["written"] == 6
    assert w.stats()["one_hop_batches"] == (1 if engine.dialect.name == "sqlite" else 0)  # rows carry every column


async def test_the_request_log_writer_hands_each_written_batch_to_the_outbox(engine: AsyncEngine) -> None:
    outbox = writer(engine, ["nats"])
    log_writer = RequestLogWriter(engine, batch=2)
    log_writer.on_written = outbox.add
    for i in range(5):
        log_writer.submit(record(i))
    assert outbox.pending == 0  # nothing on the submitting path: only the log writer's flush hands over
    assert await log_writer.flush()
    assert await outbox.flush()
    async with engine.connect() as conn:
        logged = (await conn.execute(select(func.count()).select_from(request_logs))).scalar_one()
    payloads = [orjson.loads(r["payload"]) for r in await outbox_rows(engine)]
    assert logged == 5 and sorted(p["request_id"] for p in payloads) == [f"req-{i}" for i in range(5)]


async def test_claims_lease_rows_per_sink_and_take_them_again_after_the_lease(engine: AsyncEngine) -> None:
    w = writer(engine, ["webhook", "nats"])
    w.add([record(i) for i in range(5)])
    assert await w.flush()
    now = 1_000_000.0
    nats = await claim_due(engine, "nats", now=now, limit=3, lease_s=30)
    assert len(nats) == 3 and len(await claim_due(engine, "nats", now=now, limit=10, lease_s=30)) == 2
    assert await claim_due(engine, "nats", now=now + 29, limit=10, lease_s=30) == []  # all leased
    assert len(await claim_due(engine, "webhook", now=now, limit=10, lease_s=30)) == 5  # its own rows
    await mark_delivered(engine, [r.id for r in nats], now=now + 1)
    again = await claim_due(engine, "nats", now=now + 31, limit=10, lease_s=30)  # the other two: lease over
    assert len(again) == 2 and {r.id for r in again}.isdisjoint(r.id for r in nats)
    assert (await backlog(engine)) == {"nats": {"delivered": 3, "delivering": 2}, "webhook": {"delivering": 5}}


async def test_a_failed_row_waits_its_backoff_keeps_its_error_and_counts_attempts(engine: AsyncEngine) -> None:
    w = writer(engine, ["amqp"])
    w.add([record(1), record(2)])
    assert await w.flush()
    now = 1_000_000.0
    a, b = await claim_due(engine, "amqp", now=now, limit=10, lease_s=30)
    await mark_failed(engine, [(a, "ConnectionRefusedError: " + "x" * 1000)], now=now, retry_in_s=lambda n: 4.0 * n)
    await mark_delivered(engine, [b.id], now=now)
    assert await claim_due(engine, "amqp", now=now + 3.9, limit=10, lease_s=30) == []
    (retried,) = await claim_due(engine, "amqp", now=now + 4, limit=10, lease_s=30)
    assert (retried.id, retried.attempts) == (a.id, 1)
    rows = {r["id"]: r for r in await outbox_rows(engine)}
    assert rows[a.id]["last_error"].startswith("ConnectionRefusedError") and len(rows[a.id]["last_error"]) == 500
    assert (rows[b.id]["state"], rows[b.id]["attempts"], rows[b.id]["delivered_at"]) == ("delivered", 1, now)


async def test_delivered_rows_are_deleted_after_the_retention_only(engine: AsyncEngine) -> None:
    w = writer(engine, ["nats"])
    w.add([record(i) for i in range(4)])
    assert await w.flush()
    rows = await claim_due(engine, "nats", now=1_000_000.0, limit=10, lease_s=30)
    await mark_delivered(engine, [rows[0].id, rows[1].id], now=100.0)
    await mark_delivered(engine, [rows[2].id], now=200.0)
    assert await delete_delivered(engine, before=150.0, limit=1) == 1
    assert await delete_delivered(engine, before=150.0) == 1
    assert await delete_delivered(engine, before=150.0) == 0
    left = await outbox_rows(engine)
    assert sorted((r["id"], r["state"]) for r in left) == [(rows[2].id, "delivered"), (rows[3].id, "delivering")]


async def test_concurrent_claims_never_share_a_row(engine: AsyncEngine) -> None:
    w = writer(engine, ["nats"])
    w.add([record(i) for i in range(60)])
    assert await w.flush()
    claims = await asyncio.gather(*(claim_due(engine, "nats", now=1_000_000.0, limit=20, lease_s=30)
                                    for _ in range(4)))
    ids = [r.id for claim in claims for r in claim]
    assert len(ids) == 60 and len(set(ids)) == 60


def test_nothing_configured_builds_nothing() -> None:
    settings = Settings(scheduler_enabled=True)
    assert configured_sinks(settings) == []
    assert build_usage_events(settings, None, None, guard=None, provider_of=PROVIDERS.get) is None  # type: ignore[arg-type]
    assert configured_sinks(Settings(usage_nats_url="nats://127.0.0.1:4222",
                                     usage_amqp_url="amqp://guest:guest@127.0.0.1:5672/")) == ["nats", "amqp"]


async def test_stopping_the_writer_writes_what_is_queued(engine: AsyncEngine) -> None:
    w = UsageOutboxWriter(engine, ["nats"], PROVIDERS.get, flush_s=60.0)
    w.start()
    w.add([record(1), record(2)])
    await w.stop()
    assert [orjson.loads(r["payload"])["request_id"] for r in await outbox_rows(engine)] == ["req-1", "req-2"]


async def test_the_relay_deletes_rows_delivered_longer_ago_than_the_retention(engine: AsyncEngine) -> None:
    w = writer(engine, ["nats"])
    w.add([record(i) for i in range(3)])
    assert await w.flush()
    now = 1_000_000.0
    old, recent, pending = await claim_due(engine, "nats", now=now, limit=10, lease_s=30)
    await mark_delivered(engine, [old.id], now=now - 150)
    await mark_delivered(engine, [recent.id], now=now - 50)
    relay = UsageRelay(engine, [], RelayPolicy(retention_s=100), clock=FakeClock(now))
    assert await relay.cleanup() == 1
    assert sorted(r["id"] for r in await outbox_rows(engine)) == sorted((recent.id, pending.id))


class StuckSink:
    """A receiver that never answers (stands in for a hung broker)."""

    name = "nats"

    def __init__(self) -> None:
        self.called = asyncio.Event()

    async def send(self, rows: Any) -> list[str | None]:
        self.called.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def close(self) -> None:
        return None


async def test_a_relay_stopped_mid_round_gives_its_rows_back_at_once(engine: AsyncEngine) -> None:
    w = writer(engine, ["nats"])
    w.add([record(i) for i in range(3)])
    assert await w.flush()
    sink = StuckSink()
    relay = UsageRelay(engine, [sink], RelayPolicy(timeout_s=60.0))
    relay.start()
    await asyncio.wait_for(sink.called.wait(), 30)
    assert {r["state"] for r in await outbox_rows(engine)} == {"delivering"}
    await relay.stop()
    assert {(r["state"], r["attempts"], r["lease_until"]) for r in await outbox_rows(engine)} == {("pending", 0, None)}
