"""Passes over many runs at once: every run's tasks submitted in one call, every run's pass written in one
transaction in which each run is all or nothing, a refused task failing only its own step — and a run's next
step started as soon as its task ends in this process, not at the next scheduler pass. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.runtime import start_runtime
from hearth.settings import Settings
from hearth.store.tables import tasks
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.testing import task_types
from hearth.testing.fake_clock import FakeClock
from hearth.workflows import run_store
from hearth.workflows.definition_store import DefinitionStore
from hearth.workflows.reviews import ReviewService
from hearth.workflows.runs import RunService
from tests.support import MASTER_KEY, gateway_registry, write_config

QUEUE = "ai.default"


def _picky(payload: Any) -> Any:
    if payload.get("bad"):
        raise HearthError("invalid_request", "This payload is refused.", param="bad")
    return payload


async def _noop(ctx: TaskContext) -> dict[str, Any]:
    return {}


def run_service(engine: AsyncEngine) -> RunService:
    """No worker: these tests look at what one pass decides and writes."""
    types = TaskTypes()
    task_types.register(types)
    types.register(TaskType("test.picky", _noop, queue=QUEUE, validate=_picky))
    service = TaskService(engine=engine, types=types, queues={QUEUE: QueueLimits()}, wakeups=Wakeups(),
                          guard=AddressGuard(["127.0.0.0/8"]))
    return RunService(engine, DefinitionStore(engine), service, ReviewService(engine, FakeClock()), clock=FakeClock())


async def insert(runs: RunService, name: str, inputs: list[dict[str, Any]]) -> list[str]:
    """Runs inserted as the API inserts each one, but not passed over yet."""
    stored = await runs.definitions.get(name)
    steps = [s["id"] for s in stored["spec"]["steps"]]
    new = [run_store.NewRun(id="wfr_" + new_id(), workflow=name, version=int(stored["version"]), caller="app",
                            input=i, step_ids=steps) for i in inputs]
    await run_store.create_runs(runs.engine, new, now=time.time())
    return [r.id for r in new]


async def test_one_pass_starts_the_first_step_of_every_run_with_its_own_task(engine: AsyncEngine) -> None:
    runs = run_service(engine)
    await runs.definitions.register({"name": "two", "steps": [
        {"id": "a", "kind": "task", "task_type": "test.noop", "input": {"n": "${ $.input.n }"}},
        {"id": "b", "kind": "task", "task_type": "test.noop", "needs": ["a"]}]}, known_task_types={"test.noop"})
    ids = await insert(runs, "two", [{"n": i} for i in range(40)])

    assert await runs.advance_all() == 40

    views = [await runs.get(r) for r in ids]
    firsts = [v["steps"][0] for v in views]
    assert all(s["state"] == "running" and s["task_id"] for s in firsts)
    assert all(v["steps"][1]["state"] == "waiting" for v in views)
    found = await runs.tasks.get_many([s["task_id"] for s in firsts])
    assert len(found) == 40  # forty distinct tasks, each keyed by its run and step
    assert {found[s["task_id"]]["idempotency_key"] for s in firsts} == {f"wf:{r}:a" for r in ids}
    assert sorted(t["payload"]["n"] for t in found.values()) == list(range(40))


async def test_a_refused_task_fails_its_own_step_and_the_other_runs_of_the_pass_go_on(engine: AsyncEngine) -> None:
    runs = run_service(engine)
    await runs.definitions.register({"name": "picky", "steps": [
        {"id": "a", "kind": "task", "task_type": "test.picky", "input": {"bad": "${ $.input.bad }"}}]},
        known_task_types={"test.picky"})
    ids = await insert(runs, "picky", [{"bad": i == 3} for i in range(6)])

    await runs.advance_all()

    views = {r: await runs.get(r) for r in ids}
    assert views[ids[3]]["state"] == "failed"
    assert views[ids[3]]["steps"][0]["error"]["code"] == "invalid_request"
    others = [views[r] for r in ids if r != ids[3]]
    assert all(v["state"] == "running" and v["steps"][0]["state"] == "running" and v["steps"][0]["task_id"]
               for v in others)
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(tasks))).scalar_one() == 5


async def test_a_batch_writes_each_run_whole_or_not_at_all(engine: AsyncEngine) -> None:
    """Run A was moved by another pass after this batch read it: A's pass is dropped whole, B's is written."""
    runs = run_service(engine)
    await runs.definitions.register({"name": "pair", "steps": [
        {"id": "x", "kind": "task", "task_type": "test.noop"},
        {"id": "y", "kind": "task", "task_type": "test.noop"}]}, known_task_types={"test.noop"})
    a, b = await insert(runs, "pair", [{}, {}])
    read = await run_store.load(engine, [a, b])

    def both_started(run_id: str, task: str) -> run_store.PassWrite:
        run, rows, _ = read[run_id]
        changes = run_store.Changes(steps=[
            (sid, "waiting", 0, {**{k: rows[sid][k] for k in ("review_id", "output", "error", "finished_at",
                                                               "detail", "round")},
                                 "state": "running", "task_id": f"{task}-{sid}", "started_at": 1.0})
            for sid in ("x", "y")])
        return run_store.PassWrite(run_id, run["epoch"], changes)

    other = run_store.Changes(steps=[("y", "waiting", 0, {"state": "succeeded", "output": {"by": "other"}})])
    await run_store.apply(engine, a, other, epoch=read[a][0]["epoch"], now=2.0)  # the other pass on A, first

    lost = await run_store.apply_many(engine, [both_started(a, "late"), both_started(b, "batch")], now=3.0)

    assert lost == {a}
    after = await run_store.load(engine, [a, b])
    assert after[a][1]["x"]["state"] == "waiting" and after[a][1]["x"]["task_id"] is None  # nothing of A's pass
    assert after[a][1]["y"]["output"] == {"by": "other"}
    assert [after[b][1][s]["task_id"] for s in ("x", "y")] == ["batch-x", "batch-y"]


def _slow_scheduler(tmp_path: Path, database_url: str, fake: Any, *,
                    workflows: list[dict[str, Any]] | None = None) -> Settings:
    """A runtime's settings whose scheduler passes once a minute (its first pass is at start), with the test task
    types and, optionally, workflows."""
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    if workflows is not None:
        registry["workflows"] = workflows
    return Settings(config=write_config(tmp_path / "hearth.yaml", registry), database_url=database_url,
                    master_key=MASTER_KEY, scheduler_interval_s=60, task_poll_s=0.05, task_grace_s=1.0,
                    task_modules=["hearth.testing.task_types:register"])


async def test_the_next_step_starts_when_the_task_ends_not_at_the_next_scheduler_pass(
        tmp_path: Path, database_url: str, fake: Any) -> None:
    """The scheduler passes once a minute here: a 4-step run ends in seconds only if each task's end, written by
    this process's worker, moves its run on at once."""
    rt = await start_runtime(_slow_scheduler(tmp_path, database_url, fake, workflows=[{"name": "four", "steps": [
        {"id": f"s{i}", "kind": "task", "task_type": "test.noop", **({"needs": [f"s{i - 1}"]} if i else {})}
        for i in range(4)]}]))
    try:
        assert rt.scheduler is not None
        for _ in range(100):  # the scheduler's first pass (at start) is over: the next is a minute away
            if rt.scheduler.passes:
                break
            await asyncio.sleep(0.02)
        passes = rt.scheduler.passes
        assert passes == 1
        run = await rt.runs.start("four", caller="app", run_input={})
        for _ in range(200):
            view = await rt.runs.get(run["id"])
            if view["state"] != "running":
                break
            await asyncio.sleep(0.05)  # polling the run's progress, not waiting for a window
        assert view["state"] == "succeeded", [(s["step_id"], s["state"]) for s in view["steps"]]
        assert rt.scheduler.passes == passes  # no scheduler pass moved it
        assert rt.run_waker is not None and rt.run_waker.passes >= 3
    finally:
        await rt.stop()


async def test_tasks_of_no_run_end_without_a_pass_of_the_run_waker(tmp_path: Path, database_url: str,
                                                                  fake: Any) -> None:
    """A pass reads the ended tasks' rows to find their runs: tasks that belong to no run (their idempotency key
    says so; the worker knows it from the claim) must not cost every task end a read of its row."""
    rt = await start_runtime(_slow_scheduler(tmp_path, database_url, fake))
    try:
        assert rt.run_waker is not None
        ended = asyncio.Event()
        rt.tasks.service.wakeups.on_ended(lambda _ends: ended.set())
        subs = [Submission("test.noop", {}, caller="app", idempotency_key=key) for key in (None, "order-17")]
        await rt.tasks.service.submit(subs)
        rows: list[Any] = []
        for _ in range(200):
            rows = (await rt.tasks.service.listing(caller="app", limit=10))[0]
            if rows and all(r["state"] == "succeeded" for r in rows):
                break
            await asyncio.sleep(0.05)  # polling the tasks' progress, not waiting for a window
        assert [r["state"] for r in rows] == ["succeeded", "succeeded"]
        await asyncio.wait_for(ended.wait(), 5)
        await asyncio.sleep(0.05)  # the waker lingers 5 ms before a pass: give it ten times that
        assert rt.run_waker.passes == 0
    finally:
        await rt.stop()
