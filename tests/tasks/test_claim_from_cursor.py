"""Claims from a cursor on PostgreSQL (``hearth.tasks.claim_cursor``): a claim starts at the key where the
previous one ended, so it does not step over the index entries of the tasks claimed before it — which, while
a long transaction pins the vacuum horizon, it would otherwise visit one by one — and no task that becomes
claimable behind the cursor is left there."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import orjson
from sqlalchemy import text

from hearth.capabilities.address_guard import AddressGuard
from hearth.store.db import create_engine
from hearth.tasks import queue as task_queue
from hearth.tasks.admission import QueueLimits
from hearth.tasks.claim_cursor import END
from hearth.tasks.notify import Wakeups, asyncpg_dsn
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.tasks.worker import Worker, WorkerConfig


async def _noop(ctx: TaskContext) -> dict[str, Any]:
    return {}


async def _brief(ctx: TaskContext) -> dict[str, Any]:
    await asyncio.sleep(0.02)
    return {}


def _types() -> TaskTypes:
    types = TaskTypes()
    types.register(TaskType("noop", _noop, queue="q"))
    types.register(TaskType("brief", _brief, queue="q.fast"))
    return types


def _service(engine: Any, wakeups: Wakeups | None = None) -> TaskService:
    return TaskService(engine=engine, types=_types(), queues={"q": QueueLimits(), "q.fast": QueueLimits()},
                       wakeups=wakeups or Wakeups(), guard=AddressGuard())


async def _claim(engine: Any, n: int, after: tuple[int, int] | None = None) -> list[Any]:
    return list(await task_queue.claim_now(engine, queue="q", types=["noop"], limit=n, worker="w1",
                                           now=time.time() + 1, lease_s=60.0, after=after))


async def test_a_claim_from_a_key_takes_that_priority_from_the_key_on_then_lower_priorities(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        svc = _service(engine)
        normal = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c") for _ in range(6)])]
        low = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c", priority=-1) for _ in range(3)])]
        seqs = [r["fair_seq"] for r in normal]
        assert seqs == sorted(seqs) and len(set(seqs)) == 6

        claimed = await _claim(engine, 10, after=(0, seqs[2]))

        assert [r["id"] for r in claimed[:4]] == [r["id"] for r in normal[2:]]
        assert {r["id"] for r in claimed[4:]} == {r["id"] for r in low}
        assert {(r["priority"], r["fair_seq"]) for r in claimed[:4]} == {(0, s) for s in seqs[2:]}
        assert await _claim(engine, 10, after=END) == []  # past every key
        assert [r["id"] for r in await _claim(engine, 10)] == [r["id"] for r in normal[:2]]  # only from the head
    finally:
        await engine.dispose()


async def test_a_full_claim_from_a_key_never_starts_the_lower_priority_scan(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        svc = _service(engine)
        normal = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c") for _ in range(4)])]
        await svc.submit([Submission("noop", {}, caller="c", priority=-1) for _ in range(2)])
        claimed = await _claim(engine, 2, after=(0, normal[0]["fair_seq"]))
        assert [r["id"] for r in claimed] == [r["id"] for r in normal[:2]]
    finally:
        await engine.dispose()


async def _index_entries_read(conn: asyncpg.Connection, *, after: tuple[int, int] | None) -> int:
    """Entries of the claim index a claim of 5 read — dead ones included (read, then found invisible); the
    claim runs in a transaction that is rolled back, so each probe meets the same queue."""
    sql = task_queue._CLAIM_PG if after is None else task_queue._CLAIM_PG_AFTER
    args: list[Any] = ["q", time.time() + 1, ["noop"], 5, "w2", time.time() + 60,
                       orjson.dumps({"worker": "w2"}).decode()]
    if after is not None:
        args += list(after)
    async with conn.transaction():
        assert len(await conn.fetch(sql, *args)) == 5
        read = int(await conn.fetchval("SELECT pg_stat_get_xact_tuples_returned('ix_tasks_claim'::regclass)"))
        raise _RollBack(read)


class _RollBack(Exception):
    def __init__(self, read: int) -> None:
        self.read = read


async def _read_by(conn: asyncpg.Connection, *, after: tuple[int, int] | None) -> int:
    try:
        await _index_entries_read(conn, after=after)
    except _RollBack as done:
        return done.read
    raise AssertionError("unreachable")


async def test_under_a_pinned_vacuum_horizon_a_claim_from_the_cursor_skips_what_was_claimed_before(
        postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    pin = await asyncpg.connect(asyncpg_dsn(postgres_url))
    probe = await asyncpg.connect(asyncpg_dsn(postgres_url))
    try:
        svc = _service(engine)
        await svc.submit([Submission("noop", {}, caller="c") for _ in range(1_000)])
        await pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await pin.fetchval("SELECT count(*) FROM tasks")  # the snapshot that keeps every claimed version
        last: tuple[int, int] | None = None
        for _ in range(12):
            rows = await _claim(engine, 64, after=last)
            last = max((r["priority"], r["fair_seq"]) for r in rows)

        from_cursor = await _read_by(probe, after=last)
        from_head = await _read_by(probe, after=None)

        assert from_head >= 768 + 5, from_head  # every task claimed since the pin, then the five it takes
        assert from_cursor <= 5 + 1, from_cursor  # the last task claimed (the cursor is inclusive), then the five
    finally:
        await pin.close()
        await probe.close()
        await engine.dispose()


async def _wait_terminal(svc: TaskService, ids: list[str], within_s: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    until = loop.time() + within_s
    while True:
        rows = {i: await svc.get(i, caller=None) for i in ids}
        if all(r["state"] == "succeeded" for r in rows.values()) or loop.time() > until:
            assert all(r["state"] == "succeeded" for r in rows.values()), sorted({r["state"] for r in rows.values()})
            return rows
        await asyncio.sleep(0.05)


async def test_a_worker_draining_a_backlog_still_finds_every_task_queued_behind_its_cursor(postgres_url: str) -> None:
    """A backlog keeps the worker's claims full (its cursor in use). Meanwhile: a higher-priority task submitted
    by another process (only its notification reaches the worker) and a task put back in the queue with no
    notification at all (as a row skipped while locked would be) — each starts long before the backlog drains."""
    engine = create_engine(postgres_url)
    wakeups = Wakeups()
    svc = _service(engine, wakeups)
    worker = Worker(engine, _types(), None, WorkerConfig(queues={"q.fast": 4}, lease_s=3.0, heartbeat_s=1.0,
                                                         poll_s=0.2, reap_s=0.2, grace_s=2.0),
                    wakeups=wakeups, database_url=postgres_url)
    try:
        backlog = [r for r, _ in await svc.submit([Submission("brief", {}, caller="c") for _ in range(150)])]
        silent = (await svc.submit([Submission("brief", {}, caller="c", run_after=time.time() + 3600)]))[0][0]
        await worker.start()
        runner = worker.runners["q.fast"]
        for _ in range(1000):  # until its claims run from a cursor (the backlog keeps them full)
            if runner.cursor is not None and runner.cursor.floor is not None:
                break
            await asyncio.sleep(0.01)
        assert runner.cursor is not None and runner.cursor.floor is not None

        other_process = _service(engine)  # its own wakeups: the worker hears only the NOTIFY
        urgent = (await other_process.submit([Submission("brief", {}, caller="c", priority=5)]))[0][0]
        async with engine.begin() as conn:  # behind the cursor, announced by nobody
            await conn.execute(text("UPDATE tasks SET state = 'queued', run_after = 0, fair_seq = 0 WHERE id = :id"),
                               {"id": silent["id"]})

        rows = await _wait_terminal(svc, [r["id"] for r in backlog] + [urgent["id"], silent["id"]], within_s=60)
        starts = sorted(r["started_at"] for i, r in rows.items() if i not in (urgent["id"], silent["id"]))
        for name, task in (("urgent", urgent), ("silent", silent)):
            position = sum(s < rows[task["id"]]["started_at"] for s in starts)
            assert position < 100, f"the {name} task started after {position} of the backlog's 150"
    finally:
        await worker.stop()
        await engine.dispose()
