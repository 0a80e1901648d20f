"""Workflow runs of every logic step kind — timers and events, conditions, fan-outs, loops, sub-workflows — on
SQLite and PostgreSQL, with a manual clock and a real worker executing the tasks."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.store.tables import tasks, workflow_signals
from hearth.workflows.runs import RunService
from tests.workflows.run_support import (
    clock_of,
    register,
    settle,
    start,
    states,
    step,
    step_is,
)


async def submitted(engine: AsyncEngine, run_id: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(tasks).where(
            tasks.c.idempotency_key.like(f"wf:{run_id}:%")))).scalar_one())


async def test_a_timer_wait_moves_on_only_when_the_clock_passes_it(runs: RunService) -> None:
    await register(runs, [
        {"id": "pause", "kind": "wait", "seconds": 3600},
        {"id": "after", "kind": "task", "task_type": "test.echo", "needs": ["pause"], "input": {"n": 1}},
    ])
    run_id = await start(runs)
    view = await settle(runs, run_id, step_is("pause", "running"))
    assert step(view, "pause")["detail"]["due_at"] == clock_of(runs).now() + 3600
    clock_of(runs).advance(3599)
    await runs.advance_all()
    assert states(await runs.get(run_id)) == {"pause": "running", "after": "waiting"}
    clock_of(runs).advance(1)
    view = await settle(runs, run_id)
    assert view["state"] == "succeeded" and step(view, "pause")["output"] == {"waited_s": 3600}
    assert view["output"] == {"after": {"echo": {"n": 1}}}


async def test_a_signal_sent_before_the_step_waits_is_kept_and_taken_when_it_does(runs: RunService) -> None:
    await register(runs, [
        {"id": "gate", "kind": "approval", "timeout_s": 600},
        {"id": "paid", "kind": "wait", "event": "payment", "needs": ["gate"]},
        {"id": "ship", "kind": "task", "task_type": "test.echo", "needs": ["paid"],
         "input": {"amount": "${ $.steps.paid.output.amount }"}},
    ])
    run_id = await start(runs)
    early = await runs.signal(run_id, event="payment", payload={"amount": 12})
    assert early["taken_by"] is None  # kept: the wait step has not begun
    with pytest.raises(HearthError) as refused:  # one wait step, one signal kept for it already
        await runs.signal(run_id, event="payment", payload={"amount": 99})
    assert refused.value.code == "workflow_signal_unexpected" and refused.value.details["kept_signals"] == 1
    with pytest.raises(HearthError) as unknown:
        await runs.signal(run_id, event="refund", payload={})
    assert unknown.value.code == "workflow_signal_unexpected" and unknown.value.details["waiting_steps"] == 0
    review_id = step(await runs.get(run_id), "gate")["review_id"]
    await runs.reviews.claim(review_id, reviewer="ops", lease_s=60)
    await runs.reviews.decide(review_id, reviewer="ops", decision="approve", reason="ok")
    view = await settle(runs, run_id)
    assert view["state"] == "succeeded"
    assert step(view, "paid")["output"] == {"amount": 12}
    assert step(view, "ship")["output"] == {"echo": {"amount": 12}}


async def test_signals_sent_at_once_to_one_wait_step_keep_exactly_one(runs: RunService) -> None:
    """Ten senders race for the one wait step (not yet waiting): one signal is kept, nine are refused."""
    await register(runs, [
        {"id": "gate", "kind": "approval", "timeout_s": 600},
        {"id": "paid", "kind": "wait", "event": "payment", "needs": ["gate"]},
    ])
    run_id = await start(runs)
    outcomes = await asyncio.gather(*[runs.signal(run_id, event="payment", payload={"n": i}) for i in range(10)],
                                    return_exceptions=True)
    kept = [o for o in outcomes if isinstance(o, dict)]
    refused = [o for o in outcomes if isinstance(o, HearthError)]
    assert len(kept) == 1 and len(refused) == 9, outcomes
    assert {r.code for r in refused} == {"workflow_signal_unexpected"}
    async with runs.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(workflow_signals).where(
            workflow_signals.c.run_id == run_id))).scalar_one() == 1


async def test_a_signal_to_a_waiting_step_is_taken_at_once_and_one_after_is_refused(runs: RunService) -> None:
    await register(runs, [{"id": "reply", "kind": "wait", "event": "customer.reply"}])
    run_id = await start(runs)
    sent = await runs.signal(run_id, event="customer.reply", payload=["yes"])
    assert sent["taken_by"] == "reply"
    view = await runs.get(run_id)
    assert view["state"] == "succeeded" and step(view, "reply")["output"] == ["yes"]
    with pytest.raises(HearthError) as late:
        await runs.signal(run_id, event="customer.reply", payload=["again"])
    assert late.value.code == "workflow_signal_unexpected" and late.value.details["run_state"] == "succeeded"


@pytest.mark.parametrize(("big", "taken", "skipped"), [(True, "large", "small"), (False, "small", "large")])
async def test_a_condition_runs_one_branch_and_skips_the_other(
        runs: RunService, big: bool, taken: str, skipped: str) -> None:
    await register(runs, [
        {"id": "check", "kind": "condition", "when": "${ gt($.input.total, 1000) }",
         "then": ["large"], "else": ["small"]},
        {"id": "large", "kind": "task", "task_type": "test.echo", "input": {"route": "manager"}},
        {"id": "small", "kind": "task", "task_type": "test.echo", "input": {"route": "auto"}},
        {"id": "after_large", "kind": "task", "task_type": "test.echo", "needs": ["large"], "input": {}},
        {"id": "merge", "kind": "join", "join": "any", "needs": ["large", "small"]},
        {"id": "both", "kind": "join", "needs": ["large", "small"]},
    ])
    run_id = await start(runs, total=5000 if big else 10)
    view = await settle(runs, run_id)
    assert view["state"] == "succeeded"
    assert step(view, "check")["output"] == {"branch": "then" if big else "else", "value": big}
    assert states(view)[taken] == "succeeded" and states(view)[skipped] == "skipped"
    assert step(view, skipped)["error"] == {"code": "branch_not_taken"} and step(view, skipped)["task_id"] is None
    assert states(view)["after_large"] == ("succeeded" if big else "skipped")
    assert step(view, "merge")["output"] == {taken: step(view, taken)["output"]}  # OR: the branch taken
    assert states(view)["both"] == "skipped"  # AND: a branch not taken never finishes it
    assert await submitted(runs.engine, run_id) == (2 if big else 1)


async def test_a_condition_that_is_not_a_boolean_fails_the_step(runs: RunService) -> None:
    await register(runs, [{"id": "check", "kind": "condition", "when": "${ $.input.flag }", "then": [], "else": []}])
    view = await settle(runs, await start(runs, flag="yes"))
    assert view["state"] == "failed" and view["error"]["code"] == "condition_not_boolean"


async def test_a_fanout_runs_one_task_per_item_and_keeps_their_order(runs: RunService) -> None:
    await register(runs, [
        {"id": "each", "kind": "fanout", "over": "${ $.input.pages }", "max_items": 5,
         "step": {"kind": "task", "task_type": "test.echo", "input": {"page": "${ $.item }", "i": "${ $.index }"}}},
        {"id": "after", "kind": "task", "task_type": "test.echo", "needs": ["each"],
         "input": {"n": "${ len($.steps.each.output) }"}},
    ])
    run_id = await start(runs, pages=["a", "b", "c"])
    view = await settle(runs, run_id)
    assert view["state"] == "succeeded"
    assert step(view, "each")["output"] == [{"echo": {"page": p, "i": i}} for i, p in enumerate("abc")]
    assert len(step(view, "each")["detail"]["tasks"]) == 3
    assert step(view, "after")["output"] == {"echo": {"n": 3}}
    assert await submitted(runs.engine, run_id) == 4


async def test_a_fanout_over_more_than_max_items_fails_and_runs_none(runs: RunService) -> None:
    await register(runs, [
        {"id": "each", "kind": "fanout", "over": "${ $.input.pages }", "max_items": 2,
         "step": {"kind": "task", "task_type": "test.echo", "input": {"page": "${ $.item }"}}},
    ])
    run_id = await start(runs, pages=[1, 2, 3])
    view = await settle(runs, run_id)
    assert view["state"] == "failed"
    assert step(view, "each")["error"]["code"] == "fanout_too_many_items"
    assert (step(view, "each")["error"]["items"], step(view, "each")["error"]["max_items"]) == (3, 2)
    assert await submitted(runs.engine, run_id) == 0


async def test_a_fanout_item_that_fails_fails_the_step_with_its_index(runs: RunService) -> None:
    await register(runs, [
        {"id": "each", "kind": "fanout", "over": "${ $.input.items }", "max_items": 10,
         "step": {"kind": "task", "task_type": "test.record", "input": {"tag": "${ $.item.tag }",
                                                                          "path": "${ $.item.path }"}}},
    ])
    view = await settle(runs, await start(runs, items=[{"tag": "ok", "path": "/dev/null"}, {"tag": "broken"}]))
    assert view["state"] == "failed"
    error = step(view, "each")["error"]
    assert error["code"] == "fanout_item_failed" and error["index"] == 1


@pytest.mark.parametrize(("until", "iterations", "met"), [(None, 3, False), ("${ eq($.steps.draft.output.echo.v, 1) }",
                                                                              1, True)])
async def test_a_loop_runs_its_body_again_until_done_or_bounded(
        runs: RunService, until: str | None, iterations: int, met: bool) -> None:
    loop = {"id": "refine", "kind": "loop", "body": ["draft", "score"], "max_iterations": 3, "needs": ["prepare"]}
    if until:
        loop["until"] = until
    await register(runs, [
        {"id": "prepare", "kind": "task", "task_type": "test.echo", "input": {"v": 1}},
        {"id": "draft", "kind": "task", "task_type": "test.echo", "needs": ["prepare"],
         "input": {"v": "${ $.steps.prepare.output.echo.v }"}},
        {"id": "score", "kind": "task", "task_type": "test.echo", "needs": ["draft"], "input": {"s": 7}},
        loop,
        {"id": "publish", "kind": "task", "task_type": "test.echo", "needs": ["refine"],
         "input": {"n": "${ $.steps.refine.output.iterations }", "last": "${ $.steps.draft.output.echo.v }"}},
    ])
    run_id = await start(runs)
    view = await settle(runs, run_id)
    assert view["state"] == "succeeded", view["error"]
    out = step(view, "refine")["output"]
    assert (out["iterations"], out["until_met"]) == (iterations, met)
    assert out["outputs"] == {"draft": {"echo": {"v": 1}}, "score": {"echo": {"s": 7}}}
    assert step(view, "publish")["output"] == {"echo": {"n": iterations, "last": 1}}
    history = step(view, "refine")["detail"]["history"]
    assert [h["iteration"] for h in history] == list(range(1, iterations))
    draft_tasks = {h["steps"]["draft"]["task_id"] for h in history} | {step(view, "draft")["task_id"]}
    assert len(draft_tasks) == iterations  # each iteration ran its own task
    assert step(view, "draft")["round"] == iterations - 1
    assert await submitted(runs.engine, run_id) == 2 + 2 * iterations


async def test_a_subworkflow_runs_as_a_child_run_and_ends_with_its_outcome(runs: RunService) -> None:
    await register(runs, [
        {"id": "inner", "kind": "task", "task_type": "test.echo", "input": {"doubled": "${ $.input.x }"}},
    ], name="child")
    await register(runs, [
        {"id": "call", "kind": "subworkflow", "workflow": "child", "input": {"x": "${ $.input.x }"}},
        {"id": "use", "kind": "task", "task_type": "test.echo", "needs": ["call"],
         "input": {"got": "${ $.steps.call.output.inner.echo.doubled }"}},
    ])
    run_id = await start(runs, x=21)
    view = await settle(runs, run_id)
    assert view["state"] == "succeeded"
    child_id = step(view, "call")["detail"]["run_id"]
    child = await runs.get(child_id)
    assert child["state"] == "succeeded" and child["parent"] == {"run_id": run_id, "step": "call", "depth": 1}
    assert step(view, "call")["output"] == child["output"] == {"inner": {"echo": {"doubled": 21}}}
    assert step(view, "use")["output"] == {"echo": {"got": 21}}


async def test_a_failed_child_run_fails_the_subworkflow_step(runs: RunService) -> None:
    await register(runs, [{"id": "broken", "kind": "task", "task_type": "test.record", "input": {}}], name="child")
    await register(runs, [{"id": "call", "kind": "subworkflow", "workflow": "child"}])
    view = await settle(runs, await start(runs))
    assert view["state"] == "failed"
    error = step(view, "call")["error"]
    assert error["code"] == "subworkflow_failed" and error["run_id"] == step(view, "call")["detail"]["run_id"]
    assert error["error"]["step"] == "broken"
