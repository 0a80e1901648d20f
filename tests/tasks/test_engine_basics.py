"""The engine end to end in one process: submit, claim, run, record — on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from hearth.store.tables import task_attempts, task_events
from hearth.tasks.service import Submission
from hearth.tasks.types import TaskContext, TaskType, TaskTypes


async def echo(ctx: TaskContext) -> dict[str, Any]:
    ctx.progress(50, "echoing")
    return {"echo": ctx.payload["n"]}


def _types() -> TaskTypes:
    types = TaskTypes()
    types.register(TaskType("echo", echo, queue="q.fast"))
    return types


async def test_submitted_tasks_run_once_each_and_record_their_history(harness: Any) -> None:
    h = harness(_types())
    await h.worker(concurrency=4)
    out = await h.service.submit([Submission("echo", {"n": i}, caller="c") for i in range(30)])
    ids = [row["id"] for row, created in out]
    assert all(created for _, created in out)
    rows = await h.wait_terminal(ids)
    assert {r["state"] for r in rows.values()} == {"succeeded"}
    assert [rows[i]["result"] for i in ids] == [{"echo": i} for i in range(30)]
    assert all(r["attempt"] == 1 and r["progress"] == 100 for r in rows.values())
    async with h.engine.connect() as conn:
        attempts = (await conn.execute(select(func.count()).select_from(task_attempts))).scalar_one()
        kinds = (await conn.execute(select(task_events.c.state, func.count()).where(task_events.c.kind == "state")
                                    .group_by(task_events.c.state))).all()
    assert attempts == 30
    assert dict(kinds) == {"queued": 30, "running": 30, "succeeded": 30}
