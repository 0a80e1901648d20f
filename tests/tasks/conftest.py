"""Fixtures of the task-engine tests: an engine (service + worker) on each database, with test task types."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import TaskService
from hearth.tasks.types import TaskTypes
from hearth.tasks.worker import Worker, WorkerConfig

QUEUES = ("q.fast", "q.slow")


class Harness:
    """A service and the workers started on it (stopped at the end of the test)."""

    def __init__(self, engine: AsyncEngine, types: TaskTypes, database_url: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.engine = engine
        self.types = types
        self.database_url = database_url
        self.clock = clock
        self.wakeups = Wakeups()
        self.service = TaskService(engine=engine, types=types, queues={q: QueueLimits() for q in QUEUES},
                                   wakeups=self.wakeups, guard=AddressGuard(["127.0.0.0/8"]), clock=clock)
        self.workers: list[Worker] = []

    def limit(self, queue: str, limits: QueueLimits) -> None:
        self.service.queues = {**self.service.queues, queue: limits}

    async def worker(self, concurrency: int = 8, **config: Any) -> Worker:
        values: dict[str, Any] = {"queues": {q: concurrency for q in QUEUES}, "lease_s": 3.0, "heartbeat_s": 1.0,
                                  "poll_s": 0.2, "reap_s": 0.2, "grace_s": 2.0}
        values.update(config)
        worker = Worker(self.engine, self.types, None, WorkerConfig(**values), wakeups=self.wakeups,
                        database_url=self.database_url, clock=self.clock)
        await worker.start()
        self.workers.append(worker)
        return worker

    async def wait_terminal(self, ids: list[str], within_s: float = 20.0) -> dict[str, Any]:
        """Every task's row once all are terminal (fails the test after ``within_s``)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within_s
        while True:
            rows = {i: await self.service.get(i, caller=None) for i in ids}
            if all(r["state"] in ("succeeded", "failed", "killed", "skipped", "mark_succeeded", "hold")
                   for r in rows.values()):
                return rows
            if loop.time() > until:
                states = sorted({r["state"] for r in rows.values()})
                raise AssertionError(f"tasks not terminal after {within_s} s: states {states}")
            await asyncio.sleep(0.05)


@pytest.fixture
async def harness(engine: AsyncEngine, database_url: str) -> AsyncIterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(types: TaskTypes, clock: Clock = SYSTEM_CLOCK) -> Harness:
        h = Harness(engine, types, database_url, clock)
        made.append(h)
        return h

    yield make
    for h in made:
        for w in h.workers:
            await w.stop()
