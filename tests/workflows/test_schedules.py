"""Schedules: each occurrence fires exactly once across processes, misfire and overlap policies, time zones
and DST, pause and resume — on SQLite and PostgreSQL, on an injected clock (no test waits for a minute)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.store.db import create_engine
from hearth.store.tables import schedule_occurrences, tasks
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import TaskService
from hearth.tasks.types import TaskTypes
from hearth.testing import task_types
from hearth.testing.fake_clock import FakeClock
from hearth.workflows.reviews import ReviewService
from hearth.workflows.schedules import ScheduleDefinition, ScheduleService

QUEUE = "q.fast"


def at(text: str) -> float:
    """An instant given in UTC, e.g. ``at("2026-03-08 06:59:00")``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def scheduler(engine: AsyncEngine, clock: FakeClock) -> ScheduleService:
    types = TaskTypes()
    task_types.register(types)
    service = TaskService(engine=engine, types=types, queues={QUEUE: QueueLimits()}, wakeups=Wakeups(),
                          guard=AddressGuard(["127.0.0.0/8"]), clock=clock)
    return ScheduleService(engine, service, ReviewService(engine, clock), clock=clock)


def definition(**overrides: Any) -> ScheduleDefinition:
    values: dict[str, Any] = {"name": "every-minute", "caller": "app", "cron": "* * * * *", "time_zone": "UTC",
                              "target": {"task_type": "test.noop", "payload": {}, "queue": QUEUE},
                              "overlap_policy": "allow_all"}
    values.update(overrides)
    return ScheduleDefinition(**values)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(at("2026-12-01 10:00:00"))


@pytest.fixture
def schedules(engine: AsyncEngine, clock: FakeClock) -> ScheduleService:
    return scheduler(engine, clock)


async def occurrences(engine: AsyncEngine, schedule_id: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(schedule_occurrences).where(schedule_occurrences.c.schedule_id == schedule_id)
                                  .order_by(schedule_occurrences.c.planned_at))
        return [dict(r) for r in rows.mappings()]


async def scheduled_tasks(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(tasks).where(tasks.c.idempotency_key.like("schedule:%")))
        return [dict(r) for r in rows.mappings()]


async def tick_until(schedules: ScheduleService, clock: FakeClock, until: float, step_s: float = 10.0) -> None:
    while clock.now() < until:
        clock.advance(min(step_s, until - clock.now()))
        await schedules.tick()


# --------------------------------------------------------------------------- exactly once, no leader


@pytest.fixture
async def three_processes(database_url: str, clock: FakeClock) -> AsyncIterator[list[ScheduleService]]:
    engines = [create_engine(database_url) for _ in range(3)]  # as three processes would each have their own
    yield [scheduler(e, clock) for e in engines]
    for e in engines:
        await e.dispose()


async def test_three_schedulers_over_ten_minutes_fire_each_occurrence_exactly_once(
        engine: AsyncEngine, clock: FakeClock, three_processes: list[ScheduleService]) -> None:
    first = three_processes[0]
    every_minute = await first.create(definition())
    every_20_s = await first.create(definition(name="every-20-s", cron="*/20 * * * * *"))
    end = clock.now() + 600
    while clock.now() < end:
        clock.advance(7)  # not a divisor of the minute: ticks land anywhere within it
        await asyncio.gather(*(s.tick() for s in three_processes))
    for row, expected in ((every_minute, 10), (every_20_s, 30)):
        fired = await occurrences(engine, row["id"])
        assert len(fired) == expected
        assert all(o["state"] == "fired" and o["task_id"] for o in fired)
        assert len({o["task_id"] for o in fired}) == expected  # one task per occurrence
    made = await scheduled_tasks(engine)
    assert len(made) == 40 and len({t["idempotency_key"] for t in made}) == 40
    assert {t["caller"] for t in made} == {"app"}


async def test_an_occurrence_decided_but_not_submitted_is_submitted_by_the_next_pass_once(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService) -> None:
    row = await schedules.create(definition())
    clock.advance(61)
    # as if the process died between deciding and submitting: decide only
    await schedules._decide(await schedules.get(row["id"]), clock.now())
    assert [o["task_id"] for o in await occurrences(engine, row["id"])] == [None]
    await asyncio.gather(schedules.submit_decided(), schedules.submit_decided())
    assert len(await scheduled_tasks(engine)) == 1
    assert (await occurrences(engine, row["id"]))[0]["task_id"] is not None


# --------------------------------------------------------------------------- misfires


@pytest.mark.parametrize(("policy", "fired"), [
    ("run_once", ["10:04:00"]),  # only the latest missed one
    ("run_all", ["10:01:00", "10:02:00", "10:03:00", "10:04:00"]),
    ("skip", []),
])
async def test_after_an_outage_the_misfire_policy_decides_what_fires(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService, policy: str, fired: list[str]) -> None:
    row = await schedules.create(definition(misfire_policy=policy))
    clock.advance(4 * 60 + 45)  # every process was down from 10:00 to 10:04:45
    await schedules.tick()
    got = await occurrences(engine, row["id"])
    assert [datetime.fromtimestamp(o["planned_at"], UTC).strftime("%H:%M:%S") for o in got if o["state"] == "fired"
            ] == fired
    assert {o["reason"] for o in got if o["state"] == "missed"} <= {"misfire"}
    assert len(got) == 4  # every missed occurrence is accounted for


@pytest.mark.parametrize(("decision", "state", "reason"), [
    ("approve", "fired", "approved"), ("reject", "missed", "rejected"), (None, "missed", "review_expired")])
async def test_prompt_asks_a_human_about_the_latest_missed_occurrence_and_a_timeout_never_runs_it(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService, decision: str | None, state: str,
        reason: str) -> None:
    row = await schedules.create(definition(misfire_policy="prompt", catchup_window_s=600))
    clock.advance(3 * 60 + 45)  # down from 10:00 to 10:03:45
    await schedules.tick()
    await schedules.tick()  # a second pass raises nothing twice
    got = await occurrences(engine, row["id"])
    assert [o["state"] for o in got] == ["missed", "missed", "asking"]
    review_id = got[-1]["review_id"]
    items, _ = await schedules.reviews.page(queue="schedules")
    assert [i["id"] for i in items] == [review_id] and items[0]["payload"]["planned_at"] == got[-1]["planned_at"]
    if decision is not None:
        await schedules.reviews.claim(review_id, reviewer="ops", lease_s=60)
        await schedules.reviews.decide(review_id, reviewer="ops", decision=decision, reason="checked")
    else:
        clock.advance(601)
        await schedules.reviews.expire_due()
    await schedules.tick()
    last = (await occurrences(engine, row["id"]))[2]
    assert (last["state"], last["reason"]) == (state, reason)
    assert (last["task_id"] is not None) == (state == "fired")


async def test_a_missed_occurrence_older_than_the_catchup_window_never_fires(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService) -> None:
    row = await schedules.create(definition(cron="0 * * * *", misfire_policy="run_all", catchup_window_s=1800))
    clock.advance(3 * 3600 + 600)  # down through 11:00, 12:00 and 13:00; back at 13:10
    await schedules.tick()
    got = await occurrences(engine, row["id"])
    assert [(o["state"], datetime.fromtimestamp(o["planned_at"], UTC).hour) for o in got] == [("fired", 13)]


# --------------------------------------------------------------------------- overlap


async def _two_occurrences(engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService,
                           policy: str) -> tuple[str, list[dict[str, Any]]]:
    row = await schedules.create(definition(overlap_policy=policy))
    await tick_until(schedules, clock, clock.now() + 61)  # 10:01 fires; its task is still queued (no worker)
    await tick_until(schedules, clock, clock.now() + 60)  # 10:02 meets it running
    return row["id"], await occurrences(engine, row["id"])


@pytest.mark.parametrize(("policy", "second"), [
    ("allow_all", "fired"), ("skip", "skipped"), ("buffer_one", "buffered"), ("buffer_all", "buffered"),
    ("cancel_other", "fired"),
])
async def test_an_occurrence_that_meets_a_running_one_follows_the_overlap_policy(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService, policy: str, second: str) -> None:
    _, got = await _two_occurrences(engine, clock, schedules, policy)
    assert [o["state"] for o in got] == ["fired", second]
    first_task = await schedules.tasks.get(got[0]["task_id"], caller=None)
    assert (first_task["state"] == "killed") == (policy == "cancel_other")


async def test_buffer_one_keeps_one_and_releases_it_when_the_run_ends(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService) -> None:
    schedule_id, got = await _two_occurrences(engine, clock, schedules, "buffer_one")
    await tick_until(schedules, clock, clock.now() + 60)  # 10:03: one is buffered already
    assert [o["state"] for o in await occurrences(engine, schedule_id)] == ["fired", "buffered", "skipped"]
    await schedules.tasks.cancel(got[0]["task_id"], caller=None)  # the first run ends
    await schedules.tick()
    states = await occurrences(engine, schedule_id)
    assert [(o["state"], o["reason"]) for o in states] == [("fired", None), ("fired", "buffered"),
                                                           ("skipped", "overlap")]
    assert states[1]["task_id"] is not None


async def test_buffer_all_releases_them_one_run_at_a_time(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService) -> None:
    schedule_id, got = await _two_occurrences(engine, clock, schedules, "buffer_all")
    await tick_until(schedules, clock, clock.now() + 60)
    assert [o["state"] for o in await occurrences(engine, schedule_id)] == ["fired", "buffered", "buffered"]
    await schedules.tasks.cancel(got[0]["task_id"], caller=None)
    await schedules.tick()
    await schedules.tick()  # the released one is running now: the last stays buffered
    assert [o["state"] for o in await occurrences(engine, schedule_id)] == ["fired", "fired", "buffered"]


# --------------------------------------------------------------------------- time zones and DST


async def test_a_shanghai_morning_schedule_fires_at_midnight_utc(
        engine: AsyncEngine, schedules: ScheduleService, clock: FakeClock) -> None:
    clock.set(at("2026-12-01 23:00:00"))
    row = await schedules.create(definition(name="report", cron="0 8 * * *", time_zone="Asia/Shanghai"))
    assert row["next_at"] == at("2026-12-02 00:00:00")
    await tick_until(schedules, clock, at("2026-12-03 01:00:00"), step_s=600)
    assert [o["planned_at"] for o in await occurrences(engine, row["id"])] == [at("2026-12-02 00:00:00"),
                                                                               at("2026-12-03 00:00:00")]


async def test_new_york_schedules_across_both_dst_changes_fire_at_the_right_instants(engine: AsyncEngine) -> None:
    clock = FakeClock(at("2026-03-07 12:00:00"))
    schedules = scheduler(engine, clock)
    gap = await schedules.create(definition(name="in-the-gap", cron="30 2 * * *", time_zone="America/New_York"))
    await tick_until(schedules, clock, at("2026-03-09 12:00:00"), step_s=900)
    assert [o["planned_at"] for o in await occurrences(engine, gap["id"])] == [
        at("2026-03-08 07:00:00"),  # 02:30 does not exist: fires once when the gap ends, at 03:00 EDT
        at("2026-03-09 06:30:00"),  # 02:30 EDT
    ]
    clock.set(at("2026-10-31 12:00:00"))
    fold = await schedules.create(definition(name="in-the-fold", cron="30 1 * * *", time_zone="America/New_York"))
    await tick_until(schedules, clock, at("2026-11-02 12:00:00"), step_s=900)
    assert [o["planned_at"] for o in await occurrences(engine, fold["id"])] == [
        at("2026-11-01 05:30:00"),  # 01:30 happens twice: it fires once, at the first (EDT)
        at("2026-11-02 06:30:00"),  # 01:30 EST
    ]


# --------------------------------------------------------------------------- pause, resume, trigger, backfill


async def test_a_paused_schedule_fires_nothing_and_resumes_without_catching_up(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService) -> None:
    row = await schedules.create(definition(misfire_policy="run_all"))
    await schedules.set_paused(row["id"], True)
    await tick_until(schedules, clock, clock.now() + 300)
    assert await occurrences(engine, row["id"]) == []
    resumed = await schedules.set_paused(row["id"], False)
    assert resumed["next_at"] == at("2026-12-01 10:06:00")
    await tick_until(schedules, clock, clock.now() + 65)
    assert [o["planned_at"] for o in await occurrences(engine, row["id"])] == [at("2026-12-01 10:06:00")]


async def test_trigger_fires_now_and_backfill_fills_only_what_is_missing(
        engine: AsyncEngine, clock: FakeClock, schedules: ScheduleService) -> None:
    row = await schedules.create(definition(cron="0 * * * *", overlap_policy="skip"))
    manual = await schedules.trigger(row["id"])
    assert manual["state"] == "fired" and manual["reason"] == "manual" and manual["task_id"]
    clock.advance(3 * 3600)
    assert await schedules.backfill(row["id"], at("2026-12-01 09:30:00"), clock.now()) == 3  # 11:00, 12:00, 13:00
    assert await schedules.backfill(row["id"], at("2026-12-01 09:30:00"), clock.now()) == 0  # nothing twice
    assert len(await scheduled_tasks(engine)) == 4


async def test_a_target_the_task_engine_would_refuse_is_refused_when_defined(schedules: ScheduleService) -> None:
    with pytest.raises(HearthError) as unknown:
        await schedules.create(definition(target={"task_type": "no.such.type", "payload": {}}))
    assert unknown.value.code == "task_type_unknown" and unknown.value.param == "target.task_type"
    await schedules.create(definition())
    with pytest.raises(HearthError) as twice:
        await schedules.create(definition())
    assert twice.value.code == "schedule_exists"
