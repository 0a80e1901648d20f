"""Progress reports on SQLite and PostgreSQL: a report of a running task reaches the database within the
progress delay while the task still runs; a task that succeeds before its report is written has the report
folded into its end (one row version and one event fewer: the succeeded event carries the step)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import select

from hearth.store.tables import task_events
from hearth.tasks.service import Submission
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.tasks.worker import PROGRESS_DELAY_S

RELEASE: dict[str, asyncio.Event] = {}


async def quick(ctx: TaskContext) -> dict[str, Any]:
    ctx.progress(50, "echoing")
    return {"ok": True}


async def held(ctx: TaskContext) -> dict[str, Any]:
    ctx.progress(30, "reading")
    await RELEASE[ctx.payload["key"]].wait()
    return {"ok": True}


def _types() -> TaskTypes:
    types = TaskTypes()
    types.register(TaskType("quick", quick, queue="q.fast"))
    types.register(TaskType("held", held, queue="q.fast"))
    return types


async def _events(h: Any, task_id: str) -> list[tuple[str, str, int | None, str | None]]:
    async with h.engine.connect() as conn:
        rows = (await conn.execute(select(task_events.c.kind, task_events.c.state, task_events.c.progress,
                                          task_events.c.step).where(task_events.c.task_id == task_id)
                                   .order_by(task_events.c.id))).all()
    return [tuple(r) for r in rows]


async def test_a_report_of_a_task_that_succeeds_first_is_folded_into_its_end(harness: Any) -> None:
    h = harness(_types())
    await h.worker(concurrency=4)
    (row, _), = await h.service.submit([Submission("quick", {}, caller="c")])
    done = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert (done["state"], done["progress"], done["current_step"]) == ("succeeded", 100, "echoing")
    await asyncio.sleep(PROGRESS_DELAY_S * 1.5)  # a report left behind would have been written by now
    assert await _events(h, row["id"]) == [("state", "queued", None, None), ("state", "running", None, None),
                                           ("state", "succeeded", 100, "echoing")]


async def test_a_report_of_a_running_task_is_written_within_the_delay(harness: Any) -> None:
    h = harness(_types())
    RELEASE["r1"] = asyncio.Event()
    await h.worker(concurrency=4)
    (row, _), = await h.service.submit([Submission("held", {"key": "r1"}, caller="c")])
    loop = asyncio.get_running_loop()
    until = loop.time() + PROGRESS_DELAY_S + 5.0
    while (task := await h.service.get(row["id"], caller=None))["progress"] != 30:
        assert loop.time() < until, f"progress not written: {task['state']}, {task['progress']}"
        await asyncio.sleep(0.02)
    assert (task["state"], task["current_step"]) == ("running", "reading")
    assert ("progress", "running", 30, "reading") in await _events(h, row["id"])
    RELEASE["r1"].set()
    done = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert (done["state"], done["progress"]) == ("succeeded", 100)
