"""A worker's plain successes on PostgreSQL are one autocommit statement (``transitions.apply_now``): it writes
what ``transitions.apply`` writes — the fenced move, its event and its attempt row — and a stale attempt's move
matches nothing. ``terminal.follows_up`` says which moves may skip the transaction that ``after_moves`` needs."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import func, select

from hearth.capabilities.address_guard import AddressGuard
from hearth.store.db import create_engine, write_transaction
from hearth.store.tables import task_attempts, task_events, tasks
from hearth.tasks import queue as task_queue
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.terminal import follows_up
from hearth.tasks.transitions import BULK_ROWS, AttemptEnd, Move, apply, apply_now
from hearth.tasks.types import TaskType, TaskTypes


async def _noop(ctx: Any) -> dict[str, Any]:
    return {}


def _success(task_id: str, attempt: int, n: int) -> Move:
    return Move(task_id, "succeeded", attempt, ended=AttemptEnd("succeeded", "w1", 100.0 + n), values={
        "result": {"n": n}, "progress": 100, "finished_at": 200.0, "lease_until": None, "current_step": "done",
        "versions": None, "error": None, "error_code": None})


async def test_one_statement_writes_what_apply_writes_and_is_fenced(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        types = TaskTypes()
        types.register(TaskType("noop", _noop, queue="q"))
        svc = TaskService(engine=engine, types=types, queues={"q": QueueLimits()}, wakeups=Wakeups(),
                          guard=AddressGuard())
        ids = [row["id"] for row, _ in await svc.submit([Submission("noop", {}, caller="c") for _ in range(5)])]
        claimed = await task_queue.claim_now(engine, queue="q", types=["noop"], limit=5, worker="w1",
                                             now=time.time() + 1, lease_s=9.0)
        assert {r["id"] for r in claimed} == set(ids) and {r["attempt"] for r in claimed} == {1}
        async with write_transaction(engine) as conn:
            by_apply = await apply(conn, [_success(ids[0], 1, 0), _success(ids[1], 1, 1)], now=210.0)
        by_statement = await apply_now(engine, [_success(ids[2], 1, 2), _success(ids[3], 1, 3),
                                                _success(ids[4], 2, 4)], now=210.0)  # ids[4]: a stale attempt
        assert len(by_apply) == 2
        assert sorted(m.row["id"] for m in by_statement) == sorted(ids[2:4])
        assert {k: by_statement[0].row[k] for k in by_statement[0].row if k != "id"} == \
            {k: by_apply[0].row[k] for k in by_apply[0].row if k != "id"}

        async with engine.connect() as conn:
            rows = {r["id"]: r for r in (await conn.execute(select(tasks))).mappings().all()}
            events = (await conn.execute(select(task_events).where(task_events.c.state == "succeeded")
                                         .order_by(task_events.c.task_id))).mappings().all()
            attempts = (await conn.execute(select(task_attempts).order_by(task_attempts.c.task_id))).mappings().all()

        def task_shape(i: int) -> tuple[Any, ...]:
            r = rows[ids[i]]
            return r["state"], r["result"], r["progress"], r["current_step"], r["finished_at"], r["updated_at"]

        assert [task_shape(i) for i in range(4)] == [("succeeded", {"n": i}, 100, "done", 200.0, 210.0)
                                                     for i in range(4)]
        assert (rows[ids[4]]["state"], rows[ids[4]]["result"]) == ("running", None)  # the stale move matched nothing

        def event_shape(e: Any) -> tuple[Any, ...]:
            return e["at"], e["kind"], e["state"], e["attempt"], e["progress"], e["step"], e["detail"]

        assert sorted(e["task_id"] for e in events) == sorted(ids[:4])
        assert {event_shape(e) for e in events} == {(210.0, "state", "succeeded", 1, 100, "done", None)}
        assert sorted(a["task_id"] for a in attempts) == sorted(ids[:4])
        assert {(a["attempt"], a["worker"], a["finished_at"], a["outcome"], a["error_code"]) for a in attempts} == \
            {(1, "w1", 210.0, "succeeded", None)}
        assert {a["task_id"]: a["started_at"] for a in attempts} == {ids[i]: 100.0 + i for i in range(4)}
    finally:
        await engine.dispose()


@pytest.mark.parametrize(("to", "attempt", "callback_url", "expected"), [
    ("succeeded", 1, None, False),
    ("succeeded", 2, None, True),  # a redriven task's success resolves its dead letter
    ("succeeded", 1, "https://erp.example/hook", True),  # a callback delivery is scheduled
    ("failed", 1, None, True),  # a dead letter opens
    ("killed", 1, None, False),
    ("killed", 1, "https://erp.example/hook", True),
    ("queued", 1, "https://erp.example/hook", False),  # a retry is not terminal
])
def test_follows_up_names_the_moves_after_moves_acts_on(to: str, attempt: int, callback_url: str | None,
                                                         expected: bool) -> None:
    assert follows_up(to, attempt=attempt, callback_url=callback_url) is expected


async def test_a_batch_larger_than_one_statement_is_written_whole(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        types = TaskTypes()
        types.register(TaskType("noop", _noop, queue="q"))
        svc = TaskService(engine=engine, types=types, queues={"q": QueueLimits()}, wakeups=Wakeups(),
                          guard=AddressGuard())
        n = BULK_ROWS * 2 + 7
        await svc.submit([Submission("noop", {}, caller="c") for _ in range(n)])
        claimed = await task_queue.claim_now(engine, queue="q", types=["noop"], limit=n, worker="w1",
                                             now=time.time() + 1, lease_s=9.0)
        ids = [r["id"] for r in claimed]
        moved = await apply_now(engine, [_success(i, 1, k) for k, i in enumerate(ids[:n - 5])], now=210.0)
        async with write_transaction(engine) as conn:
            moved += await apply(conn, [_success(i, 1, 0) for i in ids[n - 5:]], now=210.0)
        assert sorted(m.row["id"] for m in moved) == sorted(ids)
        async with engine.connect() as conn:
            states = dict((await conn.execute(select(tasks.c.state, func.count()).group_by(tasks.c.state))).all())
            events = (await conn.execute(select(func.count()).select_from(task_events)
                                         .where(task_events.c.state == "succeeded"))).scalar_one()
        assert (states, events) == ({"succeeded": n}, n)
    finally:
        await engine.dispose()
