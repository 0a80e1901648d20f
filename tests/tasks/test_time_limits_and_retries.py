"""Time limits and the retry loop in the worker, on SQLite and PostgreSQL: a soft limit tells the handler
to stop (it fails with ``task_soft_time_limit`` unless it finishes first), a hard limit stops it; a
transient error is retried with backoff up to the type's attempts, then fails with a P2 dead letter; an
exception the handler did not expect (a bug) fails at once, recorded as ``internal_error`` with a P1 dead letter."""

from __future__ import annotations

import asyncio
from typing import Any

from hearth.errors import HearthError
from hearth.tasks.retry import RetryPolicy
from hearth.tasks.service import Submission
from hearth.tasks.types import SoftTimeLimitExceeded, TaskContext, TaskType, TaskTypes


async def dawdle(ctx: TaskContext) -> dict[str, Any]:
    steps = 0
    try:
        while True:
            await asyncio.sleep(0.02)
            steps += 1
            ctx.check_cancel()
    except SoftTimeLimitExceeded:
        if ctx.payload.get("wrap_up"):
            return {"partial": True}
        raise


async def stuck(ctx: TaskContext) -> dict[str, Any]:
    await asyncio.sleep(60)
    return {}


async def down(ctx: TaskContext) -> dict[str, Any]:
    raise HearthError("upstream_error", "the provider is down")


async def buggy(ctx: TaskContext) -> dict[str, Any]:
    return {"value": ctx.payload["missing"]}  # a KeyError: nothing a retry would cure


def _types() -> TaskTypes:
    types = TaskTypes()
    types.register(TaskType("dawdle", dawdle, queue="q.fast", soft_time_limit_s=0.3))
    types.register(TaskType("stuck", stuck, queue="q.fast", time_limit_s=0.3))
    types.register(TaskType("down", down, queue="q.fast", retry=RetryPolicy(max_attempts=3, base_delay_s=0.05)))
    types.register(TaskType("buggy", buggy, queue="q.fast", retry=RetryPolicy(max_attempts=3, base_delay_s=0.05)))
    types.register(TaskType("buggy_retried", buggy, queue="q.fast", retry=RetryPolicy(
        max_attempts=3, base_delay_s=0.05, overrides={"internal_error": "retry"})))
    return types


async def test_a_soft_limit_asks_the_handler_to_stop(harness: Any) -> None:
    h = harness(_types())
    await h.worker()
    out = await h.service.submit([Submission("dawdle", {}, caller="c"), Submission("dawdle", {"wrap_up": True},
                                                                                    caller="c")])
    rows = await h.wait_terminal([r["id"] for r, _ in out])
    plain, wrapped = (rows[r["id"]] for r, _ in out)
    assert (plain["state"], plain["error_code"]) == ("failed", "task_soft_time_limit")
    assert (wrapped["state"], wrapped["result"]) == ("succeeded", {"partial": True})


async def test_a_hard_limit_stops_the_handler(harness: Any) -> None:
    h = harness(_types())
    await h.worker()
    (row, _), = await h.service.submit([Submission("stuck", {}, caller="c")])
    done = (await h.wait_terminal([row["id"]], within_s=5))[row["id"]]
    assert (done["state"], done["error_code"], done["attempt"]) == ("failed", "task_time_limit", 1)


async def test_a_transient_error_is_retried_up_to_the_policy_then_dead_lettered_p2(harness: Any) -> None:
    h = harness(_types())
    await h.worker()
    (row, _), = await h.service.submit([Submission("down", {}, caller="c")])
    done = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert (done["state"], done["error_code"], done["attempt"]) == ("failed", "upstream_error", 3)
    events = await h.service.events(row["id"], after_id=0)
    retries = [e for e in events if e["state"] == "queued" and e["detail"] and "retry_in_s" in e["detail"]]
    assert [e["detail"]["retry_class"] for e in retries] == ["transient", "transient"]
    assert (await h.service.dead_letter(row["id"]))["severity"] == "P2"


async def test_an_unexpected_exception_fails_at_once_as_internal_error_unless_the_policy_retries_it(
        harness: Any) -> None:
    h = harness(_types())
    await h.worker()
    out = await h.service.submit([Submission("buggy", {}, caller="c"), Submission("buggy_retried", {}, caller="c")])
    rows = await h.wait_terminal([r["id"] for r, _ in out])
    once, retried = (rows[r["id"]] for r, _ in out)
    assert (once["state"], once["error_code"], once["attempt"]) == ("failed", "internal_error", 1)
    assert once["error"]["details"] == {"exception": "KeyError"}
    events = await h.service.events(once["id"], after_id=0)
    assert [e["detail"]["retry_class"] for e in events if e["state"] == "failed"] == ["unknown"]
    assert (await h.service.dead_letter(once["id"]))["severity"] == "P1"
    assert (retried["state"], retried["error_code"], retried["attempt"]) == ("failed", "internal_error", 3)
