"""Fair shares and bounded queues, on SQLite and PostgreSQL: one user's backlog does not starve another's
task; a full queue (or user share) answers 429 ``queue_full`` and writes nothing, exactly at the bound
even under parallel submissions; low priority is refused first above the watermark."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hearth.errors import HearthError
from hearth.tasks.admission import QueueLimits
from hearth.tasks.service import Submission
from hearth.tasks.types import TaskContext, TaskType, TaskTypes


async def brief(ctx: TaskContext) -> dict[str, Any]:
    await asyncio.sleep(0.005)
    return {}


def _types() -> TaskTypes:
    types = TaskTypes()
    types.register(TaskType("brief", brief, queue="q.fast"))
    return types


async def test_a_users_five_tasks_start_before_another_users_backlog_of_200_drains(harness: Any) -> None:
    h = harness(_types())
    a = await h.service.submit([Submission("brief", {}, caller="app", end_user="alice") for _ in range(200)])
    b = await h.service.submit([Submission("brief", {}, caller="app", end_user="bob") for _ in range(5)])
    await h.worker(concurrency=2)
    rows = await h.wait_terminal([r["id"] for r, _ in a + b], within_s=60)
    order = sorted(rows.values(), key=lambda r: (r["started_at"], r["id"]))
    bob_positions = [i for i, r in enumerate(order) if r["end_user"] == "bob"]
    assert len(bob_positions) == 5
    assert max(bob_positions) < 60, f"bob's tasks started at positions {bob_positions} of 205"


async def test_priority_runs_before_fair_order(harness: Any) -> None:
    h = harness(_types())
    low = await h.service.submit([Submission("brief", {}, caller="app", end_user="u") for _ in range(10)])
    high = await h.service.submit([Submission("brief", {}, caller="app", end_user="u", priority=5)])
    await h.worker(concurrency=1)
    rows = await h.wait_terminal([r["id"] for r, _ in low + high])
    first = min(rows.values(), key=lambda r: r["started_at"])
    assert first["id"] == high[0][0]["id"]


async def test_a_full_queue_refuses_with_queue_full_and_writes_nothing(harness: Any) -> None:
    h = harness(_types())
    h.limit("q.fast", QueueLimits(max_depth=10, max_per_key=6))
    await h.service.submit([Submission("brief", {}, caller="app", end_user=f"u{i}") for i in range(9)])
    with pytest.raises(HearthError) as full:
        await h.service.submit([Submission("brief", {}, caller="app", end_user="x") for _ in range(2)])
    assert (full.value.code, full.value.status, full.value.details["bound"]) == ("queue_full", 429, "queue")
    assert full.value.retry_after is not None
    rows, _ = await h.service.listing(caller="app", limit=100)
    assert len(rows) == 9
    h.limit("q.fast", QueueLimits(max_depth=100, max_per_key=6))
    await h.service.submit([Submission("brief", {}, caller="c2", end_user="y") for _ in range(6)])
    with pytest.raises(HearthError) as share:
        await h.service.submit([Submission("brief", {}, caller="c2", end_user="y")])
    assert share.value.details["bound"] == "per_user"
    await h.service.submit([Submission("brief", {}, caller="c2", end_user="z")])  # another user still fits


async def test_above_the_watermark_low_priority_is_refused_first(harness: Any) -> None:
    h = harness(_types())
    h.limit("q.fast", QueueLimits(max_depth=10, low_priority_watermark=0.5))
    await h.service.submit([Submission("brief", {}, caller="app", end_user=f"u{i}") for i in range(5)])
    with pytest.raises(HearthError) as low:
        await h.service.submit([Submission("brief", {}, caller="app", priority=-1)])
    assert low.value.details["bound"] == "low_priority_throttled"
    await h.service.submit([Submission("brief", {}, caller="app", priority=0)])


async def test_parallel_submissions_stop_exactly_at_the_bound(harness: Any) -> None:
    h = harness(_types())
    h.limit("q.fast", QueueLimits(max_depth=15))

    async def one(i: int) -> bool:
        try:
            await h.service.submit([Submission("brief", {}, caller="app", end_user=f"u{i}")])
        except HearthError as exc:
            assert exc.code == "queue_full"
            return False
        return True

    accepted = await asyncio.gather(*(one(i) for i in range(40)))
    assert sum(accepted) == 15
    rows, _ = await h.service.listing(caller="app", limit=100)
    assert len(rows) == 15


RUNNING: dict[str, int] = {}
MOST: dict[str, int] = {}


async def counted(ctx: TaskContext) -> dict[str, Any]:
    """Counts how many of one user's tasks are executing at once (what the cap is for)."""
    user = ctx.task.end_user or ""
    RUNNING[user] = RUNNING.get(user, 0) + 1
    MOST[user] = max(MOST.get(user, 0), RUNNING[user])
    try:
        await asyncio.sleep(0.02)
    finally:
        RUNNING[user] -= 1
    return {}


async def test_a_running_cap_per_user_holds_while_other_users_fill_the_slots(harness: Any) -> None:
    types = TaskTypes()
    types.register(TaskType("counted", counted, queue="q.fast"))
    h = harness(types)
    RUNNING.clear()
    MOST.clear()
    heavy = await h.service.submit([Submission("counted", {}, caller="app", end_user="heavy") for _ in range(12)])
    light = await h.service.submit([Submission("counted", {}, caller="app", end_user=f"l{i}") for i in range(6)])
    await h.worker(concurrency=8, running_per_key={"q.fast": 2})
    await h.worker(concurrency=8, running_per_key={"q.fast": 2})
    rows = await h.wait_terminal([r["id"] for r, _ in heavy + light], within_s=30)
    assert {r["state"] for r in rows.values()} == {"succeeded"}
    assert MOST["heavy"] == 2, f"{MOST['heavy']} of one user's tasks ran at once (cap 2)"
    assert sum(1 for u in MOST if u.startswith("l")) == 6
