"""Issue 11: "a budget exhausted while the item waited → the next step is refused, not run".

An approval holds nothing while it waits — no slot, no reservation — so the step after it is admitted
afresh when the decision comes: budgets are checked at that moment, not when the run started. Real parts:
a Hearth runtime with its embedded worker calling the fake upstream through the gateway, a strict daily
token budget for the run's caller, and the run engine on an injected clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hearth.runtime import start_runtime
from hearth.settings import Settings
from hearth.tasks.service import Submission
from hearth.testing.fake_clock import FakeClock
from hearth.testing.fake_upstream import FakeUpstream
from hearth.workflows.reviews import ReviewService
from hearth.workflows.runs import RunService
from tests.support import MASTER_KEY, budget_registry, write_config
from tests.workflows.run_support import settle, step

TEXT = "Hearth keeps every budget exact, even for a step that waited a day for a human decision."
WORKFLOW = {
    "name": "approve-then-summarize",
    "steps": [
        {"id": "approve", "kind": "approval", "timeout_s": 86400, "input": {"text": "${ $.input.text }"}},
        {"id": "summarize", "kind": "task", "task_type": "summarize_async", "needs": ["approve"],
         "input": {"text": "${ $.steps.approve.output.text }", "model": "m"}},
    ],
}


@pytest.fixture
async def runtime_and_runs(tmp_path: Path, database_url: str, fake: FakeUpstream) -> AsyncIterator[Any]:
    registry = budget_registry(fake, 1500, unit="tokens")  # room for a few summaries, not for many
    registry["workflows"] = [WORKFLOW]
    settings = Settings(config=write_config(tmp_path / "hearth.yaml", registry), database_url=database_url,
                        master_key=MASTER_KEY, scheduler_enabled=False, offline_fallback=False, task_poll_s=0.05,
                        task_grace_s=1.0)
    rt = await start_runtime(settings)
    try:
        clock = FakeClock()
        yield rt, RunService(rt.engine, rt.workflows, rt.tasks.service, ReviewService(rt.engine, clock), clock=clock)
    finally:
        await rt.stop()


async def _summary_task(rt: Any) -> dict[str, Any]:
    """One summarize task for the same caller, run to its end by the embedded worker."""
    ((task, _),) = await rt.tasks.service.submit([Submission(task_type="summarize_async", caller="tester",
                                                             payload={"text": TEXT, "model": "m"})])
    for _ in range(400):
        got: dict[str, Any] = dict(await rt.tasks.service.get(task["id"], caller=None))
        if got["state"] in ("succeeded", "failed", "killed"):
            return got
        await asyncio.sleep(0.05)  # polling the worker's progress, not waiting for a window
    raise AssertionError(f"task {task['id']} did not end: {got['state']}")


async def test_a_budget_exhausted_while_the_approval_waited_refuses_the_next_step_without_calling_the_model(
        runtime_and_runs: Any, fake: FakeUpstream) -> None:
    rt, runs = runtime_and_runs
    run = await runs.start("approve-then-summarize", caller="tester", run_input={"text": TEXT})
    view = await runs.get(run["id"])
    assert step(view, "approve")["state"] == "running" and fake.stats.requests == 0

    # While the item waits, the same caller's other work spends the budget until a call is refused.
    spent = 0
    for _ in range(30):
        task = await _summary_task(rt)
        if task["state"] != "succeeded":
            assert task["error_code"] == "budget_exhausted", task
            break
        spent += 1
    else:
        raise AssertionError("the budget was never exhausted")
    assert spent >= 1  # the budget had room when the run started and its approval was raised
    calls_before_decision = fake.stats.requests

    review_id = step(view, "approve")["review_id"]
    await runs.reviews.claim(review_id, reviewer="lead", lease_s=300)
    await runs.reviews.decide(review_id, reviewer="lead", decision="approve", reason="fine")
    view = await settle(runs, run["id"], within_s=30)

    assert view["state"] == "failed"
    assert step(view, "approve")["state"] == "succeeded"
    assert step(view, "summarize")["state"] == "failed"
    assert step(view, "summarize")["error"]["code"] == "budget_exhausted"
    assert fake.stats.requests == calls_before_decision  # refused at admission: the model was never called
