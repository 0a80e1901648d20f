"""Leases, fencing, cancel and shutdown, with two workers in one process on SQLite and PostgreSQL.

A worker whose heartbeats stop loses its tasks to the reaper once the injected clock passes their lease; when
it wakes up its late result changes nothing (every write is fenced by attempt). A type not safe to repeat is
held for an operator instead of re-run; one out of attempts fails with ``worker_lost``. Cancel kills a queued
task at once and stops a running one at its next check, discarding its result. Shutdown hands running tasks back.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import select

from hearth.errors import HearthError
from hearth.store.tables import task_attempts
from hearth.tasks.service import Submission
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.tasks.worker import WorkerConfig
from hearth.testing.fake_clock import FakeClock

GATE: dict[str, asyncio.Event] = {}


async def gated(ctx: TaskContext) -> dict[str, Any]:
    """Attempt 1 waits for the test to open its gate; later attempts answer at once."""
    if ctx.task.attempt == 1:
        await GATE[ctx.task.id].wait()
    return {"attempt": ctx.task.attempt}


async def prompt(ctx: TaskContext) -> dict[str, Any]:
    return {"done": True}


async def patient(ctx: TaskContext) -> dict[str, Any]:
    for _ in range(400):
        await asyncio.sleep(0.01)
        ctx.check_cancel()
    return {"done": True}


def _types(*, unsafe: bool = False, max_attempts: int | None = None) -> TaskTypes:
    from hearth.tasks.retry import RetryPolicy

    types = TaskTypes()
    retry = RetryPolicy(max_attempts=max_attempts) if max_attempts else None
    types.register(TaskType("gated", gated, queue="q.fast", repeat_safe=not unsafe, retry=retry))
    types.register(TaskType("patient", patient, queue="q.fast"))
    types.register(TaskType("prompt", prompt, queue="q.fast"))
    return types


async def _attempts(h: Any, task_id: str) -> list[tuple[int, str]]:
    async with h.engine.connect() as conn:
        rows = (await conn.execute(select(task_attempts.c.attempt, task_attempts.c.outcome)
                                   .where(task_attempts.c.task_id == task_id).order_by(task_attempts.c.attempt))).all()
    return [(a, o) for a, o in rows]


async def _running(h: Any, task_id: str) -> None:
    for _ in range(400):
        if (await h.service.get(task_id, caller=None))["state"] == "running":
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the task never started")


def _freeze_heartbeats(worker: Any) -> None:
    worker.heartbeats_paused = True  # as if the process froze for its leases (its tasks keep running)


# Leases on the injected clock: one runs out only when a test moves the clock past it, and no heartbeat comes
# round during a test (the first is 20 minutes of real time away), so none can be under way when a test
# freezes a worker and renew its lease after the clock has moved.
LEASE = {"lease_s": 3600.0, "heartbeat_s": 1200.0}


def _outlive_the_lease(clock: FakeClock) -> None:
    """Move the injected clock past every lease claimed so far: a reaper (every 0.2 s of real time) then
    settles them."""
    clock.advance(LEASE["lease_s"] + 1)


async def test_a_stale_worker_cannot_overwrite_the_attempt_that_replaced_it(harness: Any) -> None:
    clock = FakeClock()
    h = harness(_types(), clock)
    (row, _), = await h.service.submit([Submission("gated", {}, caller="c")])
    GATE[row["id"]] = asyncio.Event()
    stale = await h.worker(concurrency=2, **LEASE)
    await _running(h, row["id"])
    _freeze_heartbeats(stale)
    await h.worker(concurrency=2, **LEASE)
    _outlive_the_lease(clock)
    done = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert (done["state"], done["attempt"], done["result"]) == ("succeeded", 2, {"attempt": 2})
    GATE[row["id"]].set()  # the stale attempt now finishes and tries to write its result
    await stale.stop()  # which has been written (or refused) once its worker has stopped
    h.workers.remove(stale)
    again = await h.service.get(row["id"], caller=None)
    assert (again["state"], again["attempt"], again["result"]) == ("succeeded", 2, {"attempt": 2})
    assert await _attempts(h, row["id"]) == [(1, "lease_expired"), (2, "succeeded")]


async def test_an_unsafe_type_lost_with_its_worker_is_held_for_an_operator(harness: Any) -> None:
    clock = FakeClock()
    h = harness(_types(unsafe=True), clock)
    (row, _), = await h.service.submit([Submission("gated", {}, caller="c")])
    GATE[row["id"]] = asyncio.Event()
    stale = await h.worker(concurrency=2, **LEASE)
    await _running(h, row["id"])
    _freeze_heartbeats(stale)
    _outlive_the_lease(clock)
    held = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert held["state"] == "hold" and "not safe to repeat" in held["hold_reason"]
    GATE[row["id"]].set()  # the lost attempt finishes after all: its result must not end the held task
    await stale.stop()
    h.workers.remove(stale)
    assert (await h.service.get(row["id"], caller=None))["state"] == "hold"
    released = await h.service.override(row["id"], to="queued", operator="ops", reason="checked upstream")
    assert released["state"] == "queued"
    await h.worker(concurrency=2)
    done = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert (done["state"], done["attempt"]) == ("succeeded", 2)
    with pytest.raises(HearthError) as nobody:
        await h.service.override(row["id"], to="queued", operator="", reason="x")
    assert nobody.value.code == "invalid_request"


async def test_out_of_attempts_a_lost_task_fails_with_worker_lost_and_a_p1_dead_letter(harness: Any) -> None:
    clock = FakeClock()
    h = harness(_types(max_attempts=1), clock)
    (row, _), = await h.service.submit([Submission("gated", {}, caller="c")])
    GATE[row["id"]] = asyncio.Event()
    stale = await h.worker(concurrency=2, **LEASE)
    await _running(h, row["id"])
    _freeze_heartbeats(stale)
    _outlive_the_lease(clock)
    failed = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert (failed["state"], failed["error_code"]) == ("failed", "worker_lost")
    letter = await h.service.dead_letter(row["id"])
    assert (letter["status"], letter["severity"], letter["error_code"]) == ("OPEN", "P1", "worker_lost")
    GATE[row["id"]].set()


async def test_cancel_kills_a_queued_task_at_once_and_stops_a_running_one(harness: Any) -> None:
    h = harness(_types())
    (queued, _), = await h.service.submit([Submission("patient", {}, caller="c")])
    killed = await h.service.cancel(queued["id"], caller="c")
    assert killed["state"] == "killed" and killed["error_code"] == "task_cancelled"
    (running, _), = await h.service.submit([Submission("patient", {}, caller="c")])
    await h.worker(concurrency=2)
    await _running(h, running["id"])
    asked = await h.service.cancel(running["id"], caller="c")
    assert asked["cancel_requested"] is True
    done = (await h.wait_terminal([running["id"]], within_s=3))[running["id"]]
    assert done["state"] == "killed" and done["result"] is None
    assert await _attempts(h, running["id"]) == [(1, "killed")]
    with pytest.raises(HearthError) as late:
        await h.service.cancel(running["id"], caller="c")
    assert late.value.code == "task_state_conflict"


async def test_shutdown_hands_running_tasks_back_to_the_queue(harness: Any) -> None:
    h = harness(_types())
    (row, _), = await h.service.submit([Submission("patient", {}, caller="c")])
    worker = await h.worker(concurrency=2, grace_s=0.2)
    await _running(h, row["id"])
    await worker.stop()
    h.workers.remove(worker)
    back = await h.service.get(row["id"], caller=None)
    assert (back["state"], back["worker"], back["lease_until"]) == ("queued", None, None)
    assert await _attempts(h, row["id"]) == [(1, "handed_back")]


async def test_a_task_due_later_waits_until_its_time_on_the_injected_clock(harness: Any) -> None:
    clock = FakeClock()
    h = harness(_types(), clock)
    (row, _), = await h.service.submit([Submission("prompt", {}, caller="c", run_after=clock.now() + 3600)])
    assert row["state"] == "waiting"
    worker = await h.worker(concurrency=2, reap_s=3600)  # only this test's reap_once() promotes: no race with it
    assert await worker.reap_once() == 0
    assert (await h.service.get(row["id"], caller=None))["state"] == "waiting"
    clock.advance(3601)
    assert await worker.reap_once() == 1
    done = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert done["state"] == "succeeded" and done["result"] == {"done": True}


def test_a_heartbeat_slower_than_a_third_of_the_lease_is_refused_at_start() -> None:
    with pytest.raises(SystemExit, match="at most a third"):
        WorkerConfig(queues={"q": 1}, lease_s=9, heartbeat_s=4).check()
