"""Helpers of the workflow run tests: a run service (on a manual clock, or the system clock for the operator
actions' tests) with a real worker draining its tasks, and readers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.store.tables import tasks
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import TaskService
from hearth.tasks.types import TaskTypes
from hearth.tasks.worker import Worker, WorkerConfig
from hearth.testing import task_types
from hearth.testing.fake_clock import FakeClock
from hearth.workflows.definition_store import DefinitionStore
from hearth.workflows.reviews import ReviewService
from hearth.workflows.runs import RunService

QUEUE = "ai.default"  # where hearth.testing.task_types puts its types


@contextlib.asynccontextmanager
async def run_service_with_worker(engine: AsyncEngine, database_url: str) -> AsyncIterator[RunService]:
    """Runs and reviews read one :class:`FakeClock` (``runs.clock``); tasks run on a real worker."""
    types = TaskTypes()
    task_types.register(types)
    tasks = TaskService(engine=engine, types=types, queues={QUEUE: QueueLimits()}, wakeups=Wakeups(),
                        guard=AddressGuard(["127.0.0.0/8"]))
    clock = FakeClock()
    runs = RunService(engine, DefinitionStore(engine), tasks, ReviewService(engine, clock), clock=clock)
    worker = Worker(engine, types, None, WorkerConfig(queues={QUEUE: 8}, lease_s=3.0, heartbeat_s=1.0, poll_s=0.05,
                                                      reap_s=0.2, grace_s=1.0),
                    wakeups=tasks.wakeups, database_url=database_url)
    await worker.start()
    try:
        yield runs
    finally:
        await worker.stop()


def clock_of(runs: RunService) -> FakeClock:
    assert isinstance(runs.clock, FakeClock)
    return runs.clock


async def register(runs: RunService, steps: list[dict[str, Any]], name: str = "wf") -> None:
    await runs.definitions.register({"name": name, "steps": steps}, known_task_types=runs.tasks.types.names())


async def start(runs: RunService, name: str = "wf", **run_input: Any) -> str:
    return str((await runs.start(name, caller="app", run_input=run_input))["id"])


async def settle(runs: RunService, run_id: str, until: Any = None, within_s: float = 20.0) -> dict[str, Any]:
    """Scheduler passes (every running run, child runs included) until ``until(view)`` holds — by default,
    until the run ended; the run's view."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    done = until or (lambda view: view["state"] != "running")
    while True:
        await runs.advance_all()
        view = await runs.get(run_id)
        if done(view):
            return view
        assert loop.time() < deadline, [(s["step_id"], s["state"]) for s in view["steps"]]
        await asyncio.sleep(0.03)


def states(view: dict[str, Any]) -> dict[str, str]:
    return {s["step_id"]: s["state"] for s in view["steps"]}


def step(view: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in view["steps"] if s["step_id"] == step_id)


def step_is(step_id: str, *wanted: str) -> Any:
    return lambda view: step(view, step_id)["state"] in wanted


def run_service(engine: AsyncEngine, *, task_service: type[TaskService] = TaskService) -> RunService:
    """A run service on the system clock (its reviews on a manual one), tasks run by :func:`worker`."""
    types = TaskTypes()
    task_types.register(types)
    service = task_service(engine=engine, types=types, queues={QUEUE: QueueLimits()}, wakeups=Wakeups(),
                           guard=AddressGuard(["127.0.0.0/8"]))
    return RunService(engine, DefinitionStore(engine), service, ReviewService(engine, FakeClock(time.time())))


def worker(runs: RunService, database_url: str) -> Worker:
    return Worker(runs.engine, runs.tasks.types, None, WorkerConfig(
        queues={QUEUE: 8}, lease_s=3.0, heartbeat_s=1.0, poll_s=0.05, reap_s=0.2, grace_s=1.0),
        wakeups=runs.tasks.wakeups, database_url=database_url)


async def until(check: Any, within_s: float = 15.0, what: str = "") -> Any:
    """Poll the async ``check`` until it returns something truthy (real time: a worker is running tasks)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not (found := await check()):
        assert loop.time() < deadline, f"timed out waiting for {what or check}"
        await asyncio.sleep(0.03)
    return found


async def finished(runs: RunService, run_id: str, within_s: float = 20.0) -> dict[str, Any]:
    async def ended() -> dict[str, Any] | None:
        await runs.advance(run_id)
        view = await runs.get(run_id)
        return view if view["state"] not in ("running", "paused") else None

    found: dict[str, Any] = await until(ended, within_s, f"run {run_id} to end")
    return found


async def task_keys(engine: AsyncEngine, run_id: str) -> dict[str, str]:
    """Every task the run's steps submitted: idempotency key → task id."""
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tasks.c.idempotency_key, tasks.c.id).where(
            tasks.c.idempotency_key.like(f"wf:{run_id}:%")))).all()
    return {r[0]: r[1] for r in rows}
