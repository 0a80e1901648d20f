"""The polled alert checks (a scheduler pass) and the dead-letter alert, on SQLite and PostgreSQL: each kind
fires once when its condition holds, a repeat within the window is suppressed and counted, and nothing fires
while the condition does not hold or alerts are off. Time is a fake clock (the worker's test uses real time)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.alerting.checks import AlertChecks
from hearth.alerting.config import AlertConfig
from hearth.alerting.sender import AlertSender
from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.gateway.budget import counter_key, period_key
from hearth.gateway.health import HealthBook
from hearth.observability import alerts
from hearth.registry.snapshot import Budget, Caller, Registry
from hearth.state.base import Epoch
from hearth.state.memory import MemoryState
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.terminal import TerminalRules
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.tasks.worker import Worker, WorkerConfig
from hearth.testing.fake_clock import FakeClock
from hearth.workflows.reviews import ReviewRequest, ReviewService
from tests.observability.alert_support import KEY, LOCAL, Receiver, running_receiver

INTERVAL = 30.0
WINDOW = 3600.0


class Checks:
    """An :class:`AlertChecks` on a fake clock, with its own breakers, memory state and registry."""

    def __init__(self, engine: AsyncEngine, **config: Any) -> None:
        self.engine = engine
        self.clock = FakeClock()
        self.health = HealthBook(3, 30.0, clock=self.clock)
        self.state = MemoryState(self.clock)
        self.registry = Registry()
        self.reviews = ReviewService(engine, self.clock)
        values: dict[str, Any] = {"url": "http://127.0.0.1:9/unused", "signing_key": KEY, "window_s": WINDOW,
                                  "check_interval_s": INTERVAL, "breaker_open_s": 300.0, "review_lead_s": 900.0}
        values.update(config)
        self.config = AlertConfig(**values)
        self.checks = AlertChecks(engine, self.config, registry=lambda: self.registry, health=self.health,
                                  state=self.state, reviews=self.reviews, clock=self.clock)

    async def next_pass(self) -> int:
        """A pass once the check interval has gone by (a pass before it does nothing)."""
        self.clock.advance(INTERVAL)
        return await self.checks.run_pass()

    async def rows(self, kind: str) -> list[dict[str, Any]]:
        return [dict(r) for r in reversed(await alerts.page(self.engine, kind=kind, state=None, before_id=None,
                                                            limit=100))]


async def test_a_circuit_open_for_longer_than_the_threshold_fires_once_and_repeats_are_counted(
        engine: AsyncEngine) -> None:
    c = Checks(engine)
    opened = c.clock.now()
    for _ in range(3):
        c.health.failed("ep-a", c.clock.now())
    assert c.health.get("ep-a").state(c.clock.now()) == "open"
    c.clock.advance(31)  # half-open: the probe fails, the circuit opens again (still the same outage)
    assert c.health.started("ep-a", c.clock.now())
    c.health.failed("ep-a", c.clock.now())
    assert await c.checks.run_pass() == 0  # open 31 s: under the 300 s threshold
    assert await c.checks.run_pass() == 0  # within the check interval: not even looked at
    c.clock.set(opened + 300)
    assert await c.checks.run_pass() == 1
    assert await c.next_pass() == 0  # still open: the repeat is suppressed
    (row,) = await c.rows("breaker_open")
    assert (row["subject"], row["severity"], row["suppressed"]) == ("ep-a", "P2", 1)
    assert row["payload"] == {"endpoint": "ep-a", "opened_at": opened, "open_s": 300.0}
    c.health.succeeded("ep-a", 12.0)  # closed: nothing more
    assert await c.next_pass() == 0
    assert (await c.rows("breaker_open"))[0]["suppressed"] == 1


async def test_a_budget_crossing_80_then_100_percent_fires_each_once(engine: AsyncEngine) -> None:
    c = Checks(engine)
    c.registry = Registry(budgets=(
        Budget("daily", "tester", "caller", "*", "day", "tokens", 1000),
        Budget("acme-month", "*", "tenant", "acme", "month", "money", 2_000_000),
        Budget("per-user", "*", "user", "*", "day", "tokens", 10)),  # a counter per user: not checked here
        callers_by_name={"tester": Caller("tester")})
    now = datetime.fromtimestamp(c.clock.now(), UTC)
    daily = counter_key("daily", "tester", "tester", period_key("day", now)[0])
    acme = counter_key("acme-month", "tester", "acme", period_key("month", now)[0])
    per_user = counter_key("per-user", "tester", "u1", period_key("day", now)[0])
    await c.state.install_epoch(Epoch("e1", 0.0, 0), {daily: (790, 0), acme: (1_000_000, 0), per_user: (50, 0)}, (),
                                30.0)
    assert await c.next_pass() == 0  # 79 %, 50 %
    await c.state.adjust_counters({daily: 10})
    assert await c.next_pass() == 1
    assert await c.next_pass() == 0  # still at 80 %: suppressed
    await c.state.adjust_counters({daily: 200, acme: 1_000_000})
    assert await c.next_pass() == 2
    rows = {r["subject"]: r for r in await c.rows("budget_threshold")}
    assert {s: (r["severity"], r["suppressed"]) for s, r in rows.items()} == {
        f"{daily}@0.8": ("P2", 1), f"{daily}@1": ("P1", 0), f"{acme}@1": ("P1", 0)}
    assert rows[f"{daily}@1"]["payload"] == {"budget": "daily", "caller": "tester", "scope": "caller", "period": "day",
                                  "period_key": daily.rsplit("|", 1)[-1], "unit": "tokens", "threshold": 1.0,
                                  "limit": 1000, "used": 1000}
    money = rows[f"{acme}@1"]["payload"]
    assert (money["limit"], money["used"]) == (2.0, 2.0)  # money in currency units, not micro-units


async def _noop(ctx: TaskContext) -> dict[str, Any]:
    return {}


async def test_a_queue_whose_oldest_due_task_waited_past_its_threshold_fires_once(engine: AsyncEngine) -> None:
    c = Checks(engine, queue_age_s={"q.fast": 60.0, "q.slow": 60.0})
    types = TaskTypes()
    types.register(TaskType("noop", _noop, queue="q.fast"))
    service = TaskService(engine=engine, types=types, queues={"q.fast": QueueLimits(), "q.slow": QueueLimits()},
                          wakeups=Wakeups(), guard=LOCAL, clock=c.clock)
    submitted = c.clock.now()
    await service.submit([Submission("noop", {}, caller="c")])
    await service.submit([Submission("noop", {}, caller="c", run_after=submitted + 3600)])  # not due: not late
    assert await c.checks.run_pass() == 0
    assert await c.next_pass() == 0  # 30 s
    assert await c.next_pass() == 0  # 60 s: at the threshold, not over it
    assert await c.next_pass() == 1  # 90 s
    assert await c.next_pass() == 0
    (row,) = await c.rows("queue_backlog")
    assert (row["subject"], row["suppressed"]) == ("q.fast", 1)
    assert row["payload"] == {"queue": "q.fast", "oldest_age_s": 90.0, "threshold_s": 60.0}


async def test_review_items_about_to_expire_then_expired_fire_once_per_queue(engine: AsyncEngine) -> None:
    c = Checks(engine)
    first = await c.reviews.raise_item(ReviewRequest(title="a", payload={}, timeout_s=600, queue="finance"))
    await c.reviews.raise_item(ReviewRequest(title="b", payload={}, timeout_s=800, queue="finance"))
    await c.reviews.raise_item(ReviewRequest(title="c", payload={}, timeout_s=5000, queue="legal"))  # not yet
    assert await c.checks.run_pass() == 1
    (expiring,) = await c.rows("review_expiring")
    assert (expiring["subject"], expiring["severity"]) == ("finance", "P3")
    assert expiring["payload"] == {"queue": "finance", "items": 2, "first_expires_at": first["expires_at"],
                                   "lead_s": 900.0}
    c.clock.advance(601)
    assert await c.reviews.expire_due() == 1
    assert await c.checks.run_pass() == 1  # expired (the expiring one is within its window: suppressed)
    (expired,) = await c.rows("review_expired")
    assert (expired["subject"], expired["severity"], expired["payload"]["items"]) == ("finance", "P2", 1)
    assert await c.next_pass() == 0  # expired before the previous pass: not again
    assert len(await c.rows("review_expired")) == 1
    assert (await c.rows("review_expiring"))[0]["suppressed"] == 2


async def test_nothing_fires_while_no_condition_holds(engine: AsyncEngine) -> None:
    c = Checks(engine, queue_age_s={"q.fast": 60.0})
    c.health.failed("ep-a", c.clock.now())  # one failure: the circuit stays closed
    for _ in range(3):
        assert await c.next_pass() == 0
    assert await alerts.page(engine, kind=None, state=None, before_id=None, limit=10) == []


# --------------------------------------------------------------------------- dead letters


async def _bad_input(ctx: TaskContext) -> dict[str, Any]:
    ctx.progress(40, "validating")
    raise HearthError("invalid_request", "the document is corrupt")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running_receiver() as r:
        yield r


@pytest.mark.parametrize("alerts_on", [True, False])
async def test_a_dead_letter_raises_its_alert_with_its_severity_through_the_alert_path(
        engine: AsyncEngine, database_url: str, receiver: Receiver, alerts_on: bool) -> None:
    types = TaskTypes()
    types.register(TaskType("bad", _bad_input, queue="q.fast"))
    rules = TerminalRules(alert_window_s=WINDOW if alerts_on else None)
    wakeups = Wakeups()
    service = TaskService(engine=engine, types=types, queues={"q.fast": QueueLimits()}, wakeups=wakeups,
                          guard=LOCAL, rules=rules)
    worker = Worker(engine, types, None, WorkerConfig(queues={"q.fast": 1}, lease_s=3.0, heartbeat_s=1.0,
                                                      poll_s=0.2, reap_s=0.2, grace_s=2.0, rules=rules),
                    wakeups=wakeups, database_url=database_url)
    ended = asyncio.Event()
    wakeups.on_ended(lambda _ids: ended.set())
    await worker.start()
    try:
        (row, _), = await service.submit([Submission("bad", {}, caller="c")])
        await asyncio.wait_for(ended.wait(), 20)
    finally:
        await worker.stop()
    assert (await service.dead_letter(row["id"]))["severity"] == "P3"
    found = await alerts.page(engine, kind="dead_letter", state=None, before_id=None, limit=10)
    if not alerts_on:
        assert found == []  # not configured: nothing is raised
        return
    (alert,) = found
    assert (alert["subject"], alert["severity"]) == (row["id"], "P3")
    config = AlertConfig(url=receiver.url, signing_key=KEY)
    async with aiohttp.ClientSession() as session:
        assert await AlertSender(engine, session, config, guard=AddressGuard(["127.0.0.0/8"])).deliver_due() == 1
    (got,) = receiver.received
    assert got["headers"]["X-Hearth-Event"] == "alert.dead_letter"
    body = got["body"]["alert"]
    assert (body["kind"], body["subject"], body["severity"]) == ("dead_letter", row["id"], "P3")
    assert {k: body["payload"][k] for k in ("task_id", "task_type", "queue", "caller", "error_code",
                                            "failure_stage", "message", "attempts", "severity")} == {
        "task_id": row["id"], "task_type": "bad", "queue": "q.fast", "caller": "c", "error_code": "invalid_request",
        "failure_stage": "validating", "message": "the document is corrupt", "attempts": 1, "severity": "P3"}
