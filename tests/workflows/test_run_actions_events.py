"""The events of a workflow run, as the SSE stream computes them from successive reads of its rows: a snapshot
first, then operator actions, step and run changes, heartbeats in silence, and the end after a terminal run —
with the poll's sleep and time source injected, so no test waits for them (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.api.workflow_run_events import RunEventFrames
from hearth.workflows.run_actions import Audit, RunActions
from tests.workflows.run_support import finished, register, run_service, step, worker

OPS = Audit(operator="ops-carol", reason="watching")


@pytest.fixture
async def actions(engine: AsyncEngine, database_url: str) -> AsyncIterator[RunActions]:
    runs = run_service(engine)
    w = worker(runs, database_url)
    await w.start()
    yield RunActions(runs)
    await w.stop()


class Script:
    """The injected sleep: each poll moves the fake time on and first does what the test planned for that poll."""

    def __init__(self, plan: dict[int, Callable[[], Awaitable[Any]]]) -> None:
        self.plan = plan
        self.polls = 0
        self.now = 1000.0

    async def sleep(self, seconds: float) -> None:
        self.polls += 1
        self.now += seconds
        if self.polls in self.plan:
            await self.plan[self.polls]()
        assert self.polls < 200, "the stream never ended"

    def monotonic(self) -> float:
        return self.now


def parse(raw: list[bytes]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for chunk in raw:
        if chunk.startswith(b":"):
            out.append({"comment": chunk.decode().strip()})
            continue
        fields = dict(line.split(": ", 1) for line in chunk.decode().strip().split("\n"))
        out.append({"id": int(fields["id"]), "event": fields["event"], "data": orjson.loads(fields["data"])})
    return out


async def test_the_stream_sends_a_snapshot_then_each_change_and_ends_with_the_run(actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [{"id": "gate", "kind": "approval", "timeout_s": 3600, "input": {"x": 1}},
                          {"id": "after", "kind": "task", "task_type": "test.echo", "needs": ["gate"], "input": {}}])
    run_id = str((await runs.start("wf", caller="app", run_input={}))["id"])
    review_id = step(await runs.get(run_id), "gate")["review_id"]

    async def approve() -> None:
        await runs.reviews.claim(review_id, reviewer="teacher", lease_s=60)
        await runs.reviews.decide(review_id, reviewer="teacher", decision="approve", reason="fine")
        await finished(runs, run_id)

    script = Script({1: lambda: actions.pause(run_id, OPS), 2: lambda: actions.resume(run_id, OPS), 45: approve})
    frames = RunEventFrames(actions, run_id, after=0, heartbeat_s=10, poll_s=0.5, sleep=script.sleep,
                            monotonic=script.monotonic)
    events = parse([f async for f in frames.frames()])
    kinds = [e.get("event", e.get("comment")) for e in events]
    assert kinds == ["snapshot", "action", "run", "action", "run", ": heartbeat", ": heartbeat",
                     "step", "step", "run"]
    numbered = [e for e in events if "id" in e]
    assert [e["id"] for e in numbered] == list(range(1, len(numbered) + 1))
    snap = events[0]["data"]
    assert snap["id"] == run_id and [s["state"] for s in snap["steps"]] == ["running", "waiting"]
    assert events[1]["data"]["action"] == "pause" and events[1]["data"]["operator"] == "ops-carol"
    assert events[2]["data"] == {"state": "paused", "previous": "running", "error": None, "finished_at": None}
    assert events[4]["data"]["state"] == "running"
    gate, after = events[7]["data"], events[8]["data"]
    assert (gate["step_id"], gate["previous"], gate["state"]) == ("gate", "running", "succeeded")
    assert (after["step_id"], after["previous"], after["state"]) == ("after", "waiting", "succeeded")  # folded
    assert events[-1]["data"]["state"] == "succeeded" and events[-1]["data"]["previous"] == "running"
    assert script.polls == 45  # it ended at the poll that saw the run end (heartbeats: 10 s quiet, polls 22 and 42)


async def test_a_resumed_stream_numbers_on_and_a_finished_run_ends_after_its_snapshot(actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [{"id": "a", "kind": "task", "task_type": "test.echo", "input": {}}])
    run_id = str((await runs.start("wf", caller="app", run_input={}))["id"])
    await finished(runs, run_id)
    script = Script({})
    frames = RunEventFrames(actions, run_id, after=41, heartbeat_s=10, sleep=script.sleep, monotonic=script.monotonic)
    events = parse([f async for f in frames.frames()])
    assert [(e["id"], e["event"]) for e in events] == [(42, "snapshot")]
    assert events[0]["data"]["state"] == "succeeded" and script.polls == 0
