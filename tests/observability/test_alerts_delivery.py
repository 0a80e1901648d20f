"""The alert log and its sender, on SQLite and PostgreSQL with a real signed receiver on 127.0.0.1: an alert is
raised once per (kind, subject) per window, its repeats counted and reported with the next one; delivery is
signed, retried after a 500 with backoff, given up after the last attempt. Time is a fake clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.alerting.config import AlertConfig, alert_config, check_alert_url
from hearth.alerting.sender import AlertSender
from hearth.capabilities.address_guard import AddressGuard
from hearth.observability import alerts
from hearth.observability.alerts import Alert
from hearth.settings import Settings
from hearth.testing.fake_clock import FakeClock
from hearth.testing.server_thread import free_port
from tests.observability.alert_support import KEY, LOCAL, Receiver, running_receiver

WINDOW = 600.0


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running_receiver() as r:
        yield r


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def _sender(engine: AsyncEngine, session: aiohttp.ClientSession, clock: FakeClock, url: str, *,
            max_attempts: int = 8, guard: AddressGuard = LOCAL) -> AlertSender:
    config = AlertConfig(url=url, signing_key=KEY, window_s=WINDOW, max_attempts=max_attempts, base_delay_s=10,
                         max_delay_s=60)
    return AlertSender(engine, session, config, guard=guard, clock=clock)


BREAKER = Alert("breaker_open", "ep-a", "P2", {"endpoint": "ep-a"})


async def _rows(engine: AsyncEngine, kind: str | None = None) -> list[dict[str, object]]:
    return [dict(r) for r in reversed(await alerts.page(engine, kind=kind, state=None, before_id=None, limit=100))]


async def test_a_repeat_within_the_window_is_suppressed_counted_and_reported_with_the_next_alert(
        engine: AsyncEngine) -> None:
    t0 = 1_800_000_000.0
    first = await alerts.record_now(engine, BREAKER, now=t0, window_s=WINDOW)
    assert first is not None
    assert await alerts.record_now(engine, BREAKER, now=t0 + 10, window_s=WINDOW) is None
    assert await alerts.record_now(engine, BREAKER, now=t0 + WINDOW - 1, window_s=WINDOW) is None
    other = Alert("breaker_open", "ep-b", "P2", {"endpoint": "ep-b"})  # another subject: its own window
    assert await alerts.record_now(engine, other, now=t0 + 20, window_s=WINDOW) is not None
    (row, _) = await _rows(engine)
    assert (row["id"], row["suppressed"], row["previous_suppressed"], row["last_seen_at"]) == (
        first, 2, 0, t0 + WINDOW - 1)
    second = await alerts.record_now(engine, BREAKER, now=t0 + WINDOW, window_s=WINDOW)  # the window is over
    assert second is not None and second != first
    rows = await _rows(engine)
    assert [(r["subject"], r["suppressed"], r["previous_suppressed"], r["state"]) for r in rows] == [
        ("ep-a", 2, 0, "pending"), ("ep-b", 0, 0, "pending"), ("ep-a", 0, 2, "pending")]


async def test_concurrent_raises_of_one_alert_make_one_row(engine: AsyncEngine) -> None:
    t0 = 1_800_000_000.0
    got = await asyncio.gather(*(alerts.record_now(engine, BREAKER, now=t0, window_s=WINDOW) for _ in range(6)))
    assert len([g for g in got if g is not None]) == 1
    (row,) = await _rows(engine)
    assert row["suppressed"] == 5


async def test_a_long_subject_is_one_key_per_subject() -> None:
    long_a, long_b = "x" * 400, "x" * 399 + "y"
    assert alerts.dedup_key("queue_backlog", long_a) != alerts.dedup_key("queue_backlog", long_b)
    assert len(alerts.dedup_key("queue_backlog", long_a)) <= 300
    with pytest.raises(ValueError):
        Alert("made_up", "s", "P1")


async def test_an_alert_is_delivered_once_signed_with_its_window_counts(
        engine: AsyncEngine, receiver: Receiver, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    sender = _sender(engine, session, clock, receiver.url)
    alert_id = await alerts.record_now(engine, BREAKER, now=clock.now(), window_s=WINDOW)
    assert await sender.deliver_due() == 1
    assert await sender.deliver_due() == 0  # delivered: nothing goes out twice
    assert receiver.forged == 0
    (got,) = receiver.received
    assert got["headers"]["X-Hearth-Event"] == "alert.breaker_open"
    assert got["headers"]["X-Hearth-Delivery"] == f"alert-{alert_id}"
    assert got["body"] == {"event": "alert", "alert": {
        "id": alert_id, "kind": "breaker_open", "subject": "ep-a", "severity": "P2", "payload": {"endpoint": "ep-a"},
        "at": clock.now(), "window_until": clock.now() + WINDOW, "suppressed": 0, "previous_suppressed": 0,
        "last_seen_at": clock.now()}}
    (row,) = await _rows(engine)
    assert (row["state"], row["attempts"], row["last_status"], row["delivered_at"]) == (
        "delivered", 1, 204, clock.now())

    clock.advance(30)  # repeated within the window: counted, not sent
    assert await alerts.record_now(engine, BREAKER, now=clock.now(), window_s=WINDOW) is None
    assert await sender.deliver_due() == 0
    clock.advance(WINDOW)  # the next window's alert carries the count
    await alerts.record_now(engine, BREAKER, now=clock.now(), window_s=WINDOW)
    assert await sender.deliver_due() == 1
    assert [(a["suppressed"], a["previous_suppressed"]) for a in receiver.alerts()] == [(0, 0), (0, 1)]


async def test_a_delivery_answered_500_is_retried_after_a_backoff_then_delivered(
        engine: AsyncEngine, receiver: Receiver, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    sender = _sender(engine, session, clock, receiver.url)
    receiver.script = [500]
    await alerts.record_now(engine, BREAKER, now=clock.now(), window_s=WINDOW)
    assert await sender.deliver_due() == 1
    (waiting,) = await _rows(engine)
    assert (waiting["state"], waiting["attempts"], waiting["last_status"]) == ("pending", 1, 500)
    assert 5 <= waiting["next_at"] - clock.now() <= 10  # half to all of the 10 s base
    assert await sender.deliver_due() == 0  # not due yet
    clock.advance(10)
    assert await sender.deliver_due() == 1
    (done,) = await _rows(engine)
    assert (done["state"], done["attempts"], done["last_status"]) == ("delivered", 2, 204)
    assert receiver.refused == 1 and len(receiver.received) == 1 and receiver.forged == 0


async def test_an_unreachable_receiver_is_given_up_after_the_last_attempt_kept_and_logged(
        engine: AsyncEngine, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    sender = _sender(engine, session, clock, f"http://127.0.0.1:{free_port()}/hooks/alerts", max_attempts=3)
    alert_id = await alerts.record_now(engine, BREAKER, now=clock.now(), window_s=WINDOW)
    for _ in range(3):
        assert await sender.deliver_due() == 1
        clock.advance(60)
    assert await sender.deliver_due() == 0
    (row,) = await _rows(engine)
    assert (row["state"], row["attempts"], row["last_error"]) == ("gave_up", 3, "ClientConnectorError")
    gave_up = [r for r in caplog.records if r.getMessage() == "alert_gave_up"]
    assert len(gave_up) == 1 and gave_up[0].levelno == logging.WARNING
    assert gave_up[0].hearth_fields["alert_id"] == alert_id


async def test_a_url_the_address_guard_refuses_is_not_called(
        engine: AsyncEngine, receiver: Receiver, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    sender = _sender(engine, session, clock, receiver.url, guard=AddressGuard([]))  # 127.0.0.1 not allowed
    await alerts.record_now(engine, BREAKER, now=clock.now(), window_s=WINDOW)
    assert await sender.deliver_due() == 1
    (row,) = await _rows(engine)
    assert (row["state"], row["last_error"]) == ("pending", "file_url_refused")
    assert receiver.received == [] and receiver.refused == 0


async def test_two_senders_deliver_an_alert_once(
        engine: AsyncEngine, receiver: Receiver, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    await alerts.record_now(engine, BREAKER, now=clock.now(), window_s=WINDOW)
    senders = [_sender(engine, session, clock, receiver.url) for _ in range(2)]
    assert sum(await asyncio.gather(*(s.deliver_due() for s in senders))) == 1
    assert len(receiver.received) == 1


async def test_the_alert_url_is_checked_at_start_signing_key_required_and_address_guarded() -> None:
    with pytest.raises(SystemExit, match="HEARTH_ALERT_URL needs HEARTH_CALLBACK_SIGNING_KEY"):
        await check_alert_url(Settings(alert_url="http://127.0.0.1:9/x"), LOCAL)
    with pytest.raises(SystemExit, match="HEARTH_ALERT_URL is refused"):
        await check_alert_url(Settings(alert_url="http://10.1.2.3/x", callback_signing_key=KEY), AddressGuard([]))
    with pytest.raises(SystemExit, match="HEARTH_ALERT_WEBHOOK_URL is refused"):
        await check_alert_url(Settings(alert_webhook_url="file:///etc/passwd", callback_signing_key=KEY), LOCAL)
    await check_alert_url(Settings(alert_url="http://127.0.0.1:9/x", callback_signing_key=KEY), LOCAL)
    assert alert_config(Settings()) is None  # not configured: alerts are off
    older = alert_config(Settings(alert_webhook_url="http://127.0.0.1:9/old", callback_signing_key=KEY))
    assert older is not None and older.url == "http://127.0.0.1:9/old"  # the dead-letter URL of before
    both = alert_config(Settings(alert_url="http://127.0.0.1:9/new", alert_webhook_url="http://127.0.0.1:9/old",
                                 callback_signing_key=KEY, alert_queue_age_s="default=300, reports=60",
                                 alert_budget_thresholds="1.0,0.5", alert_breaker_open_minutes=2))
    assert both is not None and both.url == "http://127.0.0.1:9/new"
    assert (both.queue_age_s, both.budget_thresholds, both.breaker_open_s) == (
        {"default": 300.0, "reports": 60.0}, (0.5, 1.0), 120.0)
    with pytest.raises(ValueError, match="budget thresholds"):
        Settings(alert_budget_thresholds="0,0.8")
    with pytest.raises(ValueError, match="queue age"):
        Settings(alert_queue_age_s="default=0")
