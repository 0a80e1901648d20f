"""Plain helpers of the task-engine fault tests: submit ``test.record`` tasks, wait, read the outcome back.

A run submits N ``test.record`` tasks (tag ``t00000`` …) whose handler appends ``<tag> <attempt> <pid>``
to one record file per execution, then reads back from the database each task's row, its attempts
(``task_attempts``) and how many ``succeeded`` events it has — enough to tell a lost task, a duplicated
result, or a task that ran twice, from a run where every task ended exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.store.tables import task_attempts, task_events, tasks
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import MAX_BATCH, Submission, TaskService
from hearth.tasks.types import TaskType, TaskTypes
from hearth.testing.task_types import record

TERMINAL = ("succeeded", "failed", "killed", "skipped", "mark_succeeded", "hold")


def tag(i: int) -> str:
    return f"t{i:05d}"


def record_service(engine: AsyncEngine, queue: str) -> TaskService:
    """A :class:`TaskService` (no worker) that submits ``test.record`` tasks to ``queue``."""
    types = TaskTypes()
    types.register(TaskType("test.record", record, queue=queue))
    return TaskService(engine=engine, types=types, queues={queue: QueueLimits()}, wakeups=Wakeups(),
                       guard=AddressGuard(["127.0.0.0/8"]), callbacks_enabled=False)


def record_body(i: int, path: Path, ms: int) -> dict[str, Any]:
    """The ``tasks[]`` entry (API body) or payload of task number ``i``."""
    return {"task_type": "test.record", "payload": {"tag": tag(i), "path": str(path), "ms": ms}}


async def submit_records(service: TaskService, n: int, path: Path, *, ms: int, caller: str = "tester") -> list[str]:
    """Submit ``n`` record tasks (batches of :data:`MAX_BATCH`); their ids in tag order."""
    ids: list[str] = []
    for start in range(0, n, MAX_BATCH):
        subs = [Submission(task_type="test.record", payload=record_body(i, path, ms)["payload"], caller=caller)
                for i in range(start, min(n, start + MAX_BATCH))]
        ids += [row["id"] for row, _ in await service.submit(subs)]
    return ids


def read_records(path: Path) -> list[tuple[str, int, int]]:
    """(tag, attempt, pid) of every execution so far."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        tag_, attempt, pid = line.split()
        out.append((tag_, int(attempt), int(pid)))
    return out


def executions(runs: Sequence[tuple[str, int, int]]) -> dict[str, list[int]]:
    """Tag → the attempt number of each run of its handler, from :func:`read_records`."""
    out: dict[str, list[int]] = {}
    for tag_, attempt, _ in runs:
        out.setdefault(tag_, []).append(attempt)
    return out


async def until(check: Callable[[], Awaitable[Any]], *, within: float, what: str, every: float = 0.05,
                tolerate: tuple[type[BaseException], ...] = ()) -> Any:
    """Poll ``check`` until it returns something truthy (returned), failing after ``within`` seconds.

    Exceptions of ``tolerate`` (a database restarting under the poller) count as "not yet"."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        try:
            last = await check()
            if last:
                return last
        except tolerate as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not reached within {within} s (last: {str(last)[:500]})")
        await asyncio.sleep(every)


async def states(engine: AsyncEngine) -> Counter[str]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tasks.c.state, func.count()).group_by(tasks.c.state))).all()
    return Counter({state: n for state, n in rows})


async def all_ended(engine: AsyncEngine, n: int) -> Counter[str] | None:
    """The state counts once ``n`` tasks are terminal, else ``None``."""
    counts = await states(engine)
    return counts if sum(counts[s] for s in TERMINAL) >= n else None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the database says about every task of a run."""

    tasks: Mapping[str, Mapping[Any, Any]]  # id → row
    attempts: Mapping[str, Sequence[Mapping[Any, Any]]]  # id → task_attempts rows, by attempt
    succeeded_events: Counter[str]  # id → number of `succeeded` state events

    def problems(self, ids: Sequence[str], *, executions: Mapping[str, Sequence[int]] | None = None,
                 attempts: int | None = None) -> list[str]:
        """Why the run did not end every task exactly once (empty: it did).

        ``executions`` — tag → the attempt number of each run of its handler (:func:`executions`): the final
        (succeeded) attempt ran exactly once, no attempt ran twice, and an earlier attempt ran only if it
        ended ``lease_expired`` (its worker died or lost the database while it ran; such an attempt may also
        not have run at all, when the claim committed but the worker never heard). ``attempts``: the number
        of attempts every task must have taken."""
        out: list[str] = []
        if set(self.tasks) != set(ids):
            out.append(f"{len(set(ids) - set(self.tasks))} submitted tasks missing, "
                       f"{len(set(self.tasks) - set(ids))} unknown tasks")
        for i, task_id in enumerate(ids):
            row = self.tasks.get(task_id)
            if row is None:
                continue
            name = tag(i)
            rows = self.attempts.get(task_id, ())
            if row["state"] != "succeeded":
                out.append(f"{name}: {row['state']} ({row['error_code']})")
            if row["result"] != {"tag": name}:
                out.append(f"{name}: result {row['result']!r}")
            if self.succeeded_events[task_id] != 1:
                out.append(f"{name}: {self.succeeded_events[task_id]} succeeded events")
            if [a["attempt"] for a in rows] != list(range(1, row["attempt"] + 1)):
                out.append(f"{name}: attempt rows {[a['attempt'] for a in rows]} for attempt {row['attempt']}")
            if [a["outcome"] for a in rows].count("succeeded") != 1 or (rows and rows[-1]["outcome"] != "succeeded"):
                out.append(f"{name}: attempt outcomes {[a['outcome'] for a in rows]}")
            if attempts is not None and row["attempt"] != attempts:
                out.append(f"{name}: {row['attempt']} attempts, expected {attempts}")
            if executions is not None:
                ran = sorted(executions.get(name, ()))
                lost = {a["attempt"] for a in rows if a["outcome"] == "lease_expired"}
                if ran.count(row["attempt"]) != 1 or len(set(ran)) != len(ran) or \
                        not set(ran) - {row["attempt"]} <= lost:
                    out.append(f"{name}: handler ran for attempts {ran}, attempts "
                               f"{[(a['attempt'], a['outcome']) for a in rows]}")
        return out


async def outcome(engine: AsyncEngine) -> Outcome:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tasks))).mappings().all()
        tries = (await conn.execute(select(task_attempts).order_by(task_attempts.c.task_id,
                                                                    task_attempts.c.attempt))).mappings().all()
        events = (await conn.execute(select(task_events.c.task_id, func.count())
                                     .where(task_events.c.kind == "state", task_events.c.state == "succeeded")
                                     .group_by(task_events.c.task_id))).all()
    by_task: dict[str, list[Mapping[Any, Any]]] = {}
    for a in tries:
        by_task.setdefault(a["task_id"], []).append(a)
    return Outcome(tasks={r["id"]: r for r in rows}, attempts=by_task,
                   succeeded_events=Counter({task_id: n for task_id, n in events}))
