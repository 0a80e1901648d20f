"""Operator actions on runs of the logic step kinds — which steps a rerun takes along (every edge kind, loop
bodies), a loop rerun from its first iteration, terminate stopping child runs and a terminated child failing its
parent's step — on SQLite and PostgreSQL, with a manual clock and a real worker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.workflows.definitions import WorkflowDefinition
from hearth.workflows.run_actions import Audit, RunActions, dependents
from hearth.workflows.run_plan import RunPlan
from tests.workflows.run_support import register, run_service_with_worker, settle, start, states, step, step_is

OPS = Audit(operator="ops-carol", reason="drill")


@pytest.fixture
async def actions(engine: AsyncEngine, database_url: str) -> AsyncIterator[RunActions]:
    async with run_service_with_worker(engine, database_url) as runs:
        yield RunActions(runs)


def _plan(steps: list[dict[str, object]]) -> RunPlan:
    return RunPlan.of(WorkflowDefinition.model_validate({"name": "g", "steps": steps}))


def test_dependents_follow_every_edge_kind_and_loop_bodies() -> None:
    plan = _plan([
        {"id": "fetch", "kind": "task", "task_type": "t", "on_error": "repair"},
        {"id": "repair", "kind": "task", "task_type": "t"},
        {"id": "check", "kind": "condition", "when": "${ true }", "needs": ["fetch"], "then": ["sign"],
         "else": ["drop"]},
        {"id": "sign", "kind": "approval", "timeout_s": 60, "on_timeout": "escalate"},
        {"id": "escalate", "kind": "task", "task_type": "t"},
        {"id": "drop", "kind": "task", "task_type": "t"},
        {"id": "draft", "kind": "task", "task_type": "t"},
        {"id": "score", "kind": "task", "task_type": "t", "needs": ["draft"]},
        {"id": "refine", "kind": "loop", "body": ["draft", "score"], "max_iterations": 3, "needs": ["sign"]},
        {"id": "publish", "kind": "task", "task_type": "t", "needs": ["refine"]},
        {"id": "unrelated", "kind": "task", "task_type": "t"},
    ])
    assert set(dependents(plan, "fetch")) == {"repair", "check", "sign", "drop", "escalate", "refine", "draft",
                                              "score", "publish"}
    assert set(dependents(plan, "sign")) == {"escalate", "refine", "draft", "score", "publish"}
    assert set(dependents(plan, "score")) == {"refine", "draft", "publish"}  # a body step reruns its loop
    assert set(dependents(plan, "refine")) == {"draft", "score", "publish"}
    assert dependents(plan, "publish") == [] and dependents(plan, "unrelated") == []
    order = dependents(plan, "fetch")
    assert order.index("draft") < order.index("refine") < order.index("publish")  # topological


async def test_rerun_of_a_loop_body_step_reruns_the_loop_from_its_first_iteration(actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [
        {"id": "draft", "kind": "task", "task_type": "test.echo", "input": {"v": 1}},
        {"id": "score", "kind": "task", "task_type": "test.echo", "needs": ["draft"], "input": {"s": 7}},
        {"id": "refine", "kind": "loop", "body": ["draft", "score"], "max_iterations": 2},
        {"id": "publish", "kind": "task", "task_type": "test.echo", "needs": ["refine"], "input": {}},
    ])
    run_id = await start(runs)
    done = await settle(runs, run_id)
    assert done["state"] == "succeeded" and step(done, "draft")["round"] == 1  # two iterations
    reopened = await actions.rerun(run_id, "score", OPS)
    assert reopened["state"] == "running"
    after = (await actions.view(run_id))["actions"][-1]["after"]["steps"]
    assert set(after) == {"draft", "score", "refine", "publish"}
    assert after["draft"]["round"] == 2 and after["refine"]["detail"] is None
    again = await settle(runs, run_id)
    assert again["state"] == "succeeded" and set(states(again).values()) == {"succeeded"}
    assert step(again, "refine")["output"]["iterations"] == 2
    assert step(again, "draft")["round"] == 3  # new work each iteration after the rerun: keys never reused


async def test_terminate_cancels_a_running_child_run_and_its_task(actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [{"id": "slow", "kind": "task", "task_type": "test.sleep", "input": {"ms": 20_000}}],
                   name="child")
    await register(runs, [{"id": "call", "kind": "subworkflow", "workflow": "child"}])
    run_id = await start(runs)
    view = await settle(runs, run_id, until=step_is("call", "running"))
    child_id = step(view, "call")["detail"]["run_id"]
    child = await settle(runs, child_id, until=step_is("slow", "running"))
    task_id = step(child, "slow")["task_id"]
    ended = await actions.terminate(run_id, OPS)
    assert ended["state"] == "terminated" and states(ended) == {"call": "cancelled"}
    child = await runs.get(child_id)
    assert child["state"] == "cancelled" and states(child) == {"slow": "cancelled"}
    task = await runs.tasks.get(task_id, caller=None)
    assert task["state"] == "killed" or task["cancel_requested"]


async def test_a_terminated_child_run_fails_its_parent_step_at_once(actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [{"id": "slow", "kind": "task", "task_type": "test.sleep", "input": {"ms": 20_000}}],
                   name="child")
    await register(runs, [{"id": "call", "kind": "subworkflow", "workflow": "child"}])
    run_id = await start(runs)
    view = await settle(runs, run_id, until=step_is("call", "running"))
    child_id = step(view, "call")["detail"]["run_id"]
    assert (await actions.terminate(child_id, OPS))["state"] == "terminated"
    parent = await runs.get(run_id)  # no scheduler pass in between: the action woke the parent
    assert parent["state"] == "failed"
    error = step(parent, "call")["error"]
    assert error["code"] == "subworkflow_failed" and error["run_id"] == child_id
    assert error["error"]["code"] == "run_terminated"
