"""Operator actions against concurrent scheduler passes: a pass that read the rows before an action commits
nothing after it (the run's epoch fences every write), and actions mixed with passes from several connections
leave rows that agree with each other and with the tasks — SQLite and PostgreSQL.

A pass is held between its read and its write by a task service that waits on an event inside ``get`` or
``submit`` (the real service, real database: only the timing is steered)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.store.db import create_engine
from hearth.tasks.service import TaskService
from hearth.testing.fake_clock import FakeClock
from hearth.workflows.definition_store import DefinitionStore
from hearth.workflows.run_actions import Audit, RunActions
from hearth.workflows.runs import RunService
from tests.workflows.run_support import finished, register, run_service, states, step, task_keys, until, worker

OPS = Audit(operator="ops-bob", reason="race drill")


class HeldTasks(TaskService):
    """A task service whose read of one task (a pass reads its tasks with ``get_many``), or whose next
    ``submit``, stops until released."""

    hold_get: str | None = None
    hold_submit: bool = False
    reached: asyncio.Event
    release: asyncio.Event

    def arm(self) -> None:
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def get_many(self, task_ids: Any) -> dict[str, Any]:
        rows = await super().get_many(task_ids)
        if self.hold_get in task_ids:
            self.hold_get = None
            self.reached.set()
            await self.release.wait()
        return rows

    async def submit(self, subs: Any) -> list[tuple[Any, bool]]:
        made = await super().submit(subs)
        if self.hold_submit:
            self.hold_submit = False
            self.reached.set()
            await self.release.wait()
        return made


@pytest.fixture
async def actions(engine: AsyncEngine, database_url: str) -> AsyncIterator[RunActions]:
    runs = run_service(engine)
    w = worker(runs, database_url)
    await w.start()
    yield RunActions(runs)
    await w.stop()


def held_pass(engine: AsyncEngine) -> tuple[RunService, HeldTasks]:
    runs = run_service(engine, task_service=HeldTasks)
    assert isinstance(runs.tasks, HeldTasks)
    runs.tasks.arm()
    return runs, runs.tasks


async def succeeded_task(runs: RunService, run_id: str, step_id: str) -> str:
    task_id = str(step(await runs.get(run_id), step_id)["task_id"])

    async def done() -> bool:
        return bool((await runs.tasks.get(task_id, caller=None))["state"] == "succeeded")

    await until(done, what=f"{step_id}'s task to succeed")
    return task_id


TWO_STEPS = [{"id": "a", "kind": "task", "task_type": "test.sleep", "input": {"ms": 200}},
             {"id": "b", "kind": "task", "task_type": "test.sleep", "needs": ["a"], "input": {"ms": 20_000}}]


async def test_a_pass_that_read_before_a_rerun_cannot_record_the_old_task(actions: RunActions,
                                                                          engine: AsyncEngine) -> None:
    runs = actions.runs
    await register(runs, TWO_STEPS)
    run_id = str((await runs.start("wf", caller="app", run_input={}))["id"])
    old_task = await succeeded_task(runs, run_id, "a")
    stale, held = held_pass(engine)
    held.hold_get = old_task
    passing = asyncio.create_task(stale.advance(run_id))
    await held.reached.wait()  # the pass has read "a running old_task" and sees the task succeeded
    view = await actions.rerun(run_id, "a", OPS)  # a goes back to waiting and starts afresh
    new_task = step(view, "a")["task_id"]
    assert step(view, "a")["state"] == "running" and new_task not in (None, old_task)
    held.release.set()
    await passing
    after = await runs.get(run_id)
    assert step(after, "a")["state"] == "running" and step(after, "a")["task_id"] == new_task  # not "succeeded"
    assert step(after, "a")["output"] is None and step(after, "b")["state"] == "waiting"
    await actions.terminate(run_id, OPS)


async def test_a_pass_that_read_before_a_pause_records_nothing_until_resume(actions: RunActions,
                                                                            engine: AsyncEngine) -> None:
    runs = actions.runs
    await register(runs, TWO_STEPS)
    run_id = str((await runs.start("wf", caller="app", run_input={}))["id"])
    a_task = await succeeded_task(runs, run_id, "a")
    stale, held = held_pass(engine)
    held.hold_get = a_task
    passing = asyncio.create_task(stale.advance(run_id))
    await held.reached.wait()
    paused = await actions.pause(run_id, OPS)
    held.release.set()
    await passing
    assert await actions.view(run_id) == paused  # not a row moved
    resumed = await actions.resume(run_id, OPS)
    assert step(resumed, "a")["state"] == "succeeded" and step(resumed, "b")["state"] == "running"
    await actions.terminate(run_id, OPS)


async def test_a_task_submitted_by_a_pass_overtaken_by_terminate_is_cancelled(actions: RunActions,
                                                                               engine: AsyncEngine) -> None:
    runs = actions.runs
    await register(runs, TWO_STEPS)
    run_id = str((await runs.start("wf", caller="app", run_input={}))["id"])
    await succeeded_task(runs, run_id, "a")
    stale, held = held_pass(engine)
    held.hold_submit = True
    passing = asyncio.create_task(stale.advance(run_id))
    await held.reached.wait()  # b's task exists; the write that records a's end and b's start has not happened
    orphan = (await task_keys(engine, run_id))[f"wf:{run_id}:b"]
    view = await actions.terminate(run_id, OPS)
    held.release.set()
    await passing
    assert view["state"] == "terminated"
    assert states(await runs.get(run_id)) == {"a": "cancelled", "b": "cancelled"}  # the pass wrote nothing
    assert step(await runs.get(run_id), "b")["task_id"] is None
    task = await runs.tasks.get(orphan, caller=None)
    assert task["state"] == "killed" or task["cancel_requested"]  # nothing runs for a terminated run


async def test_actions_mixed_with_passes_from_three_connections_leave_consistent_rows(
        actions: RunActions, database_url: str) -> None:
    runs = actions.runs
    chain = [f"s{i}" for i in range(5)]
    await register(runs, [*({"id": sid, "kind": "task", "task_type": "test.sleep", "input": {"ms": 30},
                             **({"needs": [chain[i - 1]]} if i else {})} for i, sid in enumerate(chain)),
                          {"id": "sign", "kind": "approval", "needs": [chain[-1]], "timeout_s": 3600, "input": {}}])
    run_id = str((await runs.start("wf", caller="app", run_input={}))["id"])
    engines = [create_engine(database_url) for _ in range(3)]
    stop = asyncio.Event()

    async def scheduler(other: RunService) -> None:
        while not stop.is_set():
            await other.advance(run_id)
            await asyncio.sleep(0.005)

    passes = [asyncio.create_task(scheduler(run_service(e))) for e in engines]
    reruns = 0
    try:
        for target in ("s1", "s0", "s3", "s2"):
            await asyncio.sleep(0.08)
            frozen = await actions.pause(run_id, OPS)
            await asyncio.sleep(0.15)  # three passes keep going: nothing may move
            assert await actions.view(run_id) == frozen
            await actions.resume(run_id, OPS)
            try:
                await actions.rerun(run_id, target, OPS)
                reruns += 1
            except HearthError as exc:  # a step that has not started yet cannot be rerun: fine
                assert exc.code == "workflow_step_state_conflict"
        sign = await until(lambda: _signable(runs, run_id), what="the last step to ask for a signature")
        await runs.reviews.claim(sign, reviewer="boss", lease_s=60)  # (the approval keeps the run from ending early)
        await runs.reviews.decide(sign, reviewer="boss", decision="approve", reason="ok")
        view = await finished(runs, run_id, within_s=30)
    finally:
        stop.set()
        await asyncio.gather(*passes)
        for e in engines:
            await e.dispose()
    assert view["state"] == "succeeded" and set(states(view).values()) == {"succeeded"}
    keys = await task_keys(runs.engine, run_id)
    for row in view["steps"][:-1]:  # each step's checkpoint is the result of its newest round's one task
        key = f"wf:{run_id}:{row['step_id']}" + (f":{row['round']}" if row["round"] else "")
        assert row["task_id"] == keys[key]
        assert row["output"] == (await runs.tasks.get(row["task_id"], caller=None))["result"]
        assert all(int(k.rsplit(":", 1)[1]) <= row["round"] for k in keys
                   if k.startswith(f"wf:{run_id}:{row['step_id']}:"))
    assert reruns >= 1
    audit = (await actions.view(run_id))["actions"]
    epochs = [(a["before"]["run"]["epoch"], a["after"]["run"]["epoch"]) for a in audit]
    assert all(after == before + 1 for before, after in epochs)
    assert [b for b, _ in epochs] == list(range(len(audit)))  # one action at a time, none lost


async def _signable(runs: RunService, run_id: str) -> str | None:
    row = step(await runs.get(run_id), "sign")
    return str(row["review_id"]) if row["state"] == "running" else None


class HeldDefinitions(DefinitionStore):
    """A definition store whose next ``get`` — a fresh pass's first, after it read the run's rows — stops."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def get(self, name: str, version: int | None = None) -> Any:
        found = await super().get(name, version)
        if not self.reached.is_set():
            self.reached.set()
            await self.release.wait()
        return found


async def test_a_pass_that_read_before_a_rerun_cannot_end_the_run_on_the_old_checkpoint(
        actions: RunActions, engine: AsyncEngine) -> None:
    """The rerun touches no row the pass writes (only the epoch tells them apart): the pass, its clock two hours
    on, sees the timer due and every step ended, and would end the run ``succeeded`` while the rerun step runs."""
    runs = actions.runs
    await register(runs, [{"id": "fetch", "kind": "task", "task_type": "test.echo", "input": {}},
                          {"id": "timer", "kind": "wait", "seconds": 3600}])
    run_id = str((await runs.start("wf", caller="app", run_input={}))["id"])
    await until(lambda: _step_is(runs, run_id, "fetch", "succeeded"), what="fetch to succeed")
    held = HeldDefinitions(engine)
    stale = RunService(engine, held, runs.tasks, runs.reviews, clock=FakeClock(time.time() + 7200))
    passing = asyncio.create_task(stale.advance(run_id))
    await held.reached.wait()  # the pass has read fetch succeeded, timer running
    view = await actions.rerun(run_id, "fetch", OPS)
    assert step(view, "fetch")["round"] == 1 and step(view, "fetch")["state"] in ("running", "succeeded")
    held.release.set()
    await passing
    after = await runs.get(run_id)
    assert after["state"] == "running" and step(after, "timer")["state"] == "running"  # the pass wrote nothing
    await actions.terminate(run_id, OPS)


async def _step_is(runs: RunService, run_id: str, step_id: str, state: str) -> bool:
    await runs.advance(run_id)
    return bool(step(await runs.get(run_id), step_id)["state"] == state)
