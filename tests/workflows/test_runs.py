"""Workflow runs: steps in dependency order with checkpointed outputs, AND and OR joins, failures, approvals
that a timer never approves, and a run another process picks up where it stood — SQLite and PostgreSQL, with a
real worker executing the tasks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.store.db import create_engine
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


def run_service(engine: AsyncEngine) -> RunService:
    types = TaskTypes()
    task_types.register(types)
    service = TaskService(engine=engine, types=types, queues={QUEUE: QueueLimits()}, wakeups=Wakeups(),
                          guard=AddressGuard(["127.0.0.0/8"]))
    return RunService(engine, DefinitionStore(engine), service, ReviewService(engine, FakeClock(time.time())))


@pytest.fixture
async def runs(engine: AsyncEngine, database_url: str) -> AsyncIterator[RunService]:
    service = run_service(engine)
    worker = Worker(engine, service.tasks.types, None, WorkerConfig(
        queues={QUEUE: 8}, lease_s=3.0, heartbeat_s=1.0, poll_s=0.05, reap_s=0.2, grace_s=1.0),
        wakeups=service.tasks.wakeups, database_url=database_url)
    await worker.start()
    yield service
    await worker.stop()


async def register(runs: RunService, steps: list[dict[str, Any]], name: str = "wf") -> None:
    await runs.definitions.register({"name": name, "steps": steps}, known_task_types=runs.tasks.types.names())


async def finished(runs: RunService, run_id: str, within_s: float = 20.0) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    until = loop.time() + within_s
    while True:
        await runs.advance(run_id)
        view = await runs.get(run_id)
        if view["state"] != "running":
            return view
        assert loop.time() < until, [(s["step_id"], s["state"]) for s in view["steps"]]
        await asyncio.sleep(0.05)


def states(view: dict[str, Any]) -> dict[str, str]:
    return {s["step_id"]: s["state"] for s in view["steps"]}


def step(view: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in view["steps"] if s["step_id"] == step_id)


async def test_steps_run_in_order_each_reading_the_checkpoints_before_it(runs: RunService) -> None:
    await register(runs, [
        {"id": "a", "kind": "task", "task_type": "test.echo", "input": {"x": "${ $.input.x }"}},
        {"id": "b", "kind": "task", "task_type": "test.echo", "needs": ["a"],
         "input": {"from_a": "${ $.steps.a.output.echo.x }", "note": "got ${ $.input.x }"}},
        {"id": "c", "kind": "task", "task_type": "test.echo", "needs": ["a"], "input": {}},
        {"id": "both", "kind": "join", "needs": ["b", "c"]},
    ])
    view = await finished(runs, (await runs.start("wf", caller="app", run_input={"x": 42}))["id"])
    assert view["state"] == "succeeded" and set(states(view).values()) == {"succeeded"}
    assert step(view, "b")["output"] == {"echo": {"from_a": 42, "note": "got 42"}}
    assert step(view, "both")["output"]["b"] == step(view, "b")["output"]
    assert step(view, "a")["finished_at"] <= step(view, "b")["started_at"]


async def test_an_or_join_takes_the_first_and_cancels_the_other(runs: RunService) -> None:
    await register(runs, [
        {"id": "fast", "kind": "task", "task_type": "test.sleep", "input": {"ms": 10}},
        {"id": "slow", "kind": "task", "task_type": "test.sleep", "input": {"ms": 20_000}},
        {"id": "first", "kind": "join", "join": "any", "needs": ["fast", "slow"]},
    ])
    view = await finished(runs, (await runs.start("wf", caller="app", run_input={}))["id"], within_s=10)
    assert view["state"] == "succeeded"
    assert states(view) == {"fast": "succeeded", "slow": "cancelled", "first": "succeeded"}
    assert step(view, "first")["output"] == {"fast": {"slept_ms": 10}}  # the loser's result is never used
    slow_task = await runs.tasks.get(step(view, "slow")["task_id"], caller=None)
    assert slow_task["cancel_requested"]


@pytest.mark.parametrize(("on_error", "run_state", "after"), [("fail", "failed", "skipped"),
                                                               ("continue", "succeeded", "succeeded")])
async def test_a_failed_step_fails_the_run_unless_it_may_continue(
        runs: RunService, on_error: str, run_state: str, after: str) -> None:
    await register(runs, [
        {"id": "broken", "kind": "task", "task_type": "test.record", "input": {}, "on_error": on_error},  # no path
        {"id": "next", "kind": "task", "task_type": "test.echo", "needs": ["broken"], "input": {}},
    ])
    view = await finished(runs, (await runs.start("wf", caller="app", run_input={}))["id"])
    assert view["state"] == run_state
    assert states(view) == {"broken": "failed", "next": after}
    if run_state == "failed":
        assert view["error"]["step"] == "broken"


@pytest.mark.parametrize(("decision", "run_state", "output"), [
    ("approve", "succeeded", {"plan": "draft 42"}),
    ("modify", "succeeded", {"plan": "better"}),
    ("reject", "failed", None),
    (None, "failed", None),  # nobody decides in time: expired, never approved
])
async def test_an_approval_waits_for_a_human_and_a_timer_never_approves(
        runs: RunService, decision: str | None, run_state: str, output: Any) -> None:
    await register(runs, [
        {"id": "draft", "kind": "task", "task_type": "test.echo", "input": {"plan": "draft ${ $.input.n }"}},
        {"id": "review", "kind": "approval", "needs": ["draft"], "timeout_s": 1,
         "input": {"plan": "${ $.steps.draft.output.echo.plan }"}},
        {"id": "publish", "kind": "task", "task_type": "test.echo", "needs": ["review"],
         "input": {"plan": "${ $.steps.review.output.plan }"}},
    ])
    run_id = (await runs.start("wf", caller="app", run_input={"n": 42}))["id"]
    loop = asyncio.get_running_loop()
    until = loop.time() + 10
    while (view := await runs.get(run_id)) and step(view, "review")["state"] != "running":
        assert loop.time() < until
        await runs.advance(run_id)
        await asyncio.sleep(0.05)
    review_id = step(view, "review")["review_id"]
    assert (await runs.reviews.get(review_id))["payload"] == {"plan": "draft 42"}
    if decision is None:
        clock = runs.reviews.clock
        assert isinstance(clock, FakeClock)
        clock.advance(2)  # past the approval's 1 s timeout
        assert await runs.reviews.expire_due() == 1
    else:
        await runs.reviews.claim(review_id, reviewer="teacher", lease_s=60)
        await runs.reviews.decide(review_id, reviewer="teacher", decision=decision, reason="read it",
                                  payload={"plan": "better"} if decision == "modify" else None)
    view = await finished(runs, run_id)
    assert view["state"] == run_state
    if output is not None:
        assert step(view, "publish")["output"] == {"echo": output}
    else:
        assert step(view, "publish")["state"] == "skipped" and step(view, "publish")["task_id"] is None


async def test_another_process_resumes_a_run_without_rerunning_finished_steps(
        runs: RunService, engine: AsyncEngine, database_url: str) -> None:
    await register(runs, [
        {"id": "one", "kind": "task", "task_type": "test.echo", "input": {"n": 1}},
        {"id": "two", "kind": "task", "task_type": "test.echo", "needs": ["one"], "input": {"n": 2}},
    ])
    run_id = (await runs.start("wf", caller="app", run_input={}))["id"]
    one_task = step(await runs.get(run_id), "one")["task_id"]
    until = asyncio.get_running_loop().time() + 10
    while (await runs.tasks.get(one_task, caller=None))["state"] != "succeeded":
        assert asyncio.get_running_loop().time() < until, "step one's task never finished"
        await asyncio.sleep(0.05)
    other_engine = create_engine(database_url)  # as a restarted process would connect afresh
    try:
        view = await finished(run_service(other_engine), run_id)
        again = await finished(run_service(other_engine), run_id)  # and a third pass changes nothing
    finally:
        await other_engine.dispose()
    assert view["state"] == "succeeded" and again == view
    async with engine.connect() as conn:
        submitted = (await conn.execute(select(func.count()).select_from(tasks).where(
            tasks.c.idempotency_key.like(f"wf:{run_id}:%")))).scalar_one()
    assert submitted == 2  # each step's task once

