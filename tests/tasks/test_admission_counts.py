"""Admission against a recent count on PostgreSQL (``hearth.tasks.admission``): a submission far from the limits
does not count its queue again — a count steps over an entry of every task processed while a long transaction
pins the vacuum horizon — yet the limits stay exact across processes, and tasks put back in a queue count."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.store.db import create_engine
from hearth.tasks import queue as task_queue
from hearth.tasks.admission import AdmissionCounts, QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.types import TaskContext, TaskType, TaskTypes


async def _noop(ctx: TaskContext) -> dict[str, Any]:
    return {}


@pytest.fixture
async def pg_engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    """PostgreSQL only: the admissions sequence and the recent counts exist there (SQLite counts every time)."""
    made = create_engine(postgres_url)
    yield made
    await made.dispose()


def _service(engine: Any, limits: QueueLimits, counts: AdmissionCounts | None = None) -> TaskService:
    types = TaskTypes()
    types.register(TaskType("noop", _noop, queue="q"))
    svc = TaskService(engine=engine, types=types, queues={"q": limits}, wakeups=Wakeups(), guard=AddressGuard())
    if counts is not None:
        svc.counts = counts
    return svc


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _row(svc: TaskService, i: int, user: str = "u") -> dict[str, Any]:
    now = time.time()
    return {"id": f"tsk_admit_{user}_{i}_{time.monotonic_ns()}", "task_type": "noop", "queue": "q", "priority": 0,
            "state": "queued", "caller": "c", "fair_key": f"u:c:{user}", "fair_seq": 0, "payload": {},
            "progress": 0, "attempt": 0, "max_attempts": 3, "repeat_safe": True, "run_after": now,
            "cancel_requested": False, "created_at": now, "updated_at": now}


async def _scans_of_tasks(conn: Any) -> int:
    """Scans of the tasks table this backend has made and not yet reported (so: compare two readings)."""
    row = (await conn.execute(text("SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables "
                                   "WHERE relname = 'tasks'"))).first()
    return int(row[0]) if row else 0


async def test_a_submission_within_a_recent_count_does_not_count_the_queue_again(pg_engine: AsyncEngine) -> None:
    clock = Clock()
    counts = AdmissionCounts(clock=clock)
    svc = _service(pg_engine, QueueLimits())
    scans = []
    for i in range(3):
        if i == 2:
            clock.t += 1.5  # past the count's second: counted again
        async with pg_engine.begin() as conn:
            before = await _scans_of_tasks(conn)
            await task_queue.enqueue(conn, [_row(svc, i)], now=time.time(), limits=svc.queues, counts=counts)
            scans.append(await _scans_of_tasks(conn) - before)
    assert scans[0] >= 1 and scans[1] == 0 and scans[2] >= 1, scans


async def test_two_processes_submitting_in_turn_stop_exactly_at_the_bound(pg_engine: AsyncEngine) -> None:
    limits = QueueLimits(max_depth=20, max_per_key=1000)
    one, two = _service(pg_engine, limits), _service(pg_engine, limits)
    admitted = 0
    for i in range(30):
        svc = one if i % 2 else two
        try:
            await svc.submit([Submission("noop", {}, caller="c", end_user=f"u{i}")])
            admitted += 1
        except HearthError as exc:
            assert exc.code == "queue_full" and exc.details["bound"] == "queue"
    assert admitted == 20
    async with pg_engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM tasks WHERE state = 'queued'"))).scalar_one() == 20


async def test_a_users_share_is_exact_across_processes(pg_engine: AsyncEngine) -> None:
    limits = QueueLimits(max_depth=10_000, max_per_key=5)
    one, two = _service(pg_engine, limits), _service(pg_engine, limits)
    await one.submit([Submission("noop", {}, caller="c", end_user="bob") for _ in range(3)])
    await two.submit([Submission("noop", {}, caller="c", end_user="bob") for _ in range(2)])
    for svc in (one, two):
        with pytest.raises(HearthError) as full:
            await svc.submit([Submission("noop", {}, caller="c", end_user="bob")])
        assert full.value.details["bound"] == "per_user"
    await one.submit([Submission("noop", {}, caller="c", end_user="carol")])  # another user still fits


async def test_a_task_released_back_into_the_queue_counts_against_another_processes_bound(
        pg_engine: AsyncEngine) -> None:
    limits = QueueLimits(max_depth=5, max_per_key=1000, low_priority_watermark=1.0)
    submitter, operator = _service(pg_engine, limits), _service(pg_engine, limits)
    held = (await operator.submit([Submission("noop", {}, caller="c", end_user="h")]))[0][0]
    async with pg_engine.begin() as conn:  # as the reaper leaves an unsafe task whose worker died
        await conn.execute(text("UPDATE tasks SET state = 'hold', attempt = 1 WHERE id = :id"), {"id": held["id"]})
    await submitter.submit([Submission("noop", {}, caller="c", end_user=f"u{i}") for i in range(3)])  # counted
    await submitter.submit([Submission("noop", {}, caller="c", end_user="x")])  # 4 pending, within its count
    await operator.override(held["id"], to="queued", operator="ops", reason="checked upstream")  # 5 pending
    with pytest.raises(HearthError) as full:
        await submitter.submit([Submission("noop", {}, caller="c", end_user="y")])
    assert full.value.details["bound"] == "queue"


async def test_fair_positions_between_counts_continue_where_the_key_left_off(pg_engine: AsyncEngine) -> None:
    svc = _service(pg_engine, QueueLimits())
    first = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c", end_user="a") for _ in range(3)])]
    second = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c", end_user="a") for _ in range(2)])]
    seqs = [r["fair_seq"] for r in first + second]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5


async def test_a_user_the_recent_count_does_not_know_is_bounded_exactly_too(pg_engine: AsyncEngine) -> None:
    limits = QueueLimits(max_depth=10_000, max_per_key=3)
    one, two = _service(pg_engine, limits), _service(pg_engine, limits)
    await one.submit([Submission("noop", {}, caller="c", end_user="ann")])  # one's count: ann only
    await two.submit([Submission("noop", {}, caller="c", end_user="dan") for _ in range(2)])
    await one.submit([Submission("noop", {}, caller="c", end_user="dan")])  # dan, unknown to one's count: 3
    with pytest.raises(HearthError) as full:
        await one.submit([Submission("noop", {}, caller="c", end_user="dan")])
    assert full.value.details["bound"] == "per_user"


async def _finish(engine: AsyncEngine, ids: list[str]) -> None:
    async with engine.begin() as conn:  # as a worker would: claimed, then done
        await conn.execute(text("UPDATE tasks SET state = 'succeeded', attempt = 1 WHERE id = ANY(:ids)"), {"ids": ids})


async def test_after_its_queue_drains_a_keys_positions_do_not_go_back(pg_engine: AsyncEngine) -> None:
    """A claimed task leaves its entry in the claim index until vacuum removes it (never, while a long transaction
    pins the horizon): new positions below the ones already taken would interleave live entries with those."""
    clock = Clock()
    svc = _service(pg_engine, QueueLimits(), AdmissionCounts(clock=clock))
    first = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c", end_user="a") for _ in range(20)])]
    await _finish(pg_engine, [r["id"] for r in first])
    clock.t += 10  # the count is stale: counted again, the queue now empty
    again = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c", end_user="a") for _ in range(2)])]
    other = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c", end_user="b")])]
    top = max(r["fair_seq"] for r in first)
    assert min(r["fair_seq"] for r in again + other) > top, (top, [r["fair_seq"] for r in again + other])


async def test_a_new_keys_first_position_is_at_the_head_of_the_queue_not_behind_it(pg_engine: AsyncEngine) -> None:
    clock = Clock()
    svc = _service(pg_engine, QueueLimits(), AdmissionCounts(clock=clock))
    backlog = [r for r, _ in await svc.submit([Submission("noop", {}, caller="c", end_user="a") for _ in range(40)])]
    ordered = sorted(backlog, key=lambda r: r["fair_seq"])
    await _finish(pg_engine, [r["id"] for r in ordered[:30]])  # claimed in claim order: 10 left
    clock.t += 10
    (newcomer, _), = await svc.submit([Submission("noop", {}, caller="c", end_user="b")])
    head = ordered[30]["fair_seq"]
    # at the head (claimed next but one), neither behind the claimed entries nor after the backlog
    assert head <= newcomer["fair_seq"] <= head + 1, (head, newcomer["fair_seq"])
