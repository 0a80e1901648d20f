"""Operator actions on workflow runs — pause, resume, terminate, rerun, skip, mark succeeded — each audited, each
refused with a stable code when it does not apply, on SQLite and PostgreSQL with a real worker running the tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.workflows.run_actions import Audit, RunActions
from hearth.workflows.runs import RunService
from tests.workflows.run_support import finished, register, run_service, states, step, task_keys, until, worker

OPS = Audit(operator="ops-alice", reason="INC-42")


@pytest.fixture
async def actions(engine: AsyncEngine, database_url: str) -> AsyncIterator[RunActions]:
    runs = run_service(engine)
    w = worker(runs, database_url)
    await w.start()
    yield RunActions(runs)
    await w.stop()


async def start(actions: RunActions, run_input: dict[str, Any] | None = None) -> str:
    return str((await actions.runs.start("wf", caller="app", run_input=run_input or {}))["id"])


async def task_done(runs: RunService, run_id: str, step_id: str) -> bool:
    task_id = step(await runs.get(run_id), step_id)["task_id"]
    return task_id is not None and (await runs.tasks.get(task_id, caller=None))["state"] == "succeeded"


async def test_a_paused_run_starts_nothing_and_records_what_ran_when_it_resumes(actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [{"id": "a", "kind": "task", "task_type": "test.sleep", "input": {"ms": 300}},
                          {"id": "b", "kind": "task", "task_type": "test.echo", "needs": ["a"], "input": {}}])
    run_id = await start(actions)
    paused = await actions.pause(run_id, OPS)
    assert paused["state"] == "paused" and states(paused) == {"a": "running", "b": "waiting"}
    await until(lambda: task_done(runs, run_id, "a"), what="a's task to finish")  # it kept running
    for _ in range(3):
        await runs.advance(run_id)
        await runs.advance_all()
    assert states(await runs.get(run_id)) == {"a": "running", "b": "waiting"}  # nothing recorded, nothing started
    resumed = await actions.resume(run_id, OPS)
    assert step(resumed, "a")["state"] == "succeeded"  # recorded at resume (b may even have finished already)
    view = await finished(runs, run_id)
    assert view["state"] == "succeeded"
    history = (await actions.view(run_id))["actions"]
    assert [(a["action"], a["operator"], a["reason"], a["step_id"]) for a in history] == [
        ("pause", "ops-alice", "INC-42", None), ("resume", "ops-alice", "INC-42", None)]
    assert history[0]["before"]["run"]["state"] == "running" and history[0]["after"]["run"]["state"] == "paused"


async def test_terminate_cancels_running_tasks_and_withdraws_review_items_never_approving(
        actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [
        {"id": "slow", "kind": "task", "task_type": "test.sleep", "input": {"ms": 20_000}},
        {"id": "approve", "kind": "approval", "timeout_s": 3600, "input": {"x": 1}},
        {"id": "after", "kind": "task", "task_type": "test.echo", "needs": ["slow", "approve"], "input": {}},
    ])
    run_id = await start(actions)
    before = await runs.get(run_id)
    review_id = step(before, "approve")["review_id"]
    await runs.reviews.claim(review_id, reviewer="teacher", lease_s=60)
    view = await actions.terminate(run_id, OPS)
    assert view["state"] == "terminated" and view["finished_at"] is not None
    assert states(view) == {"slow": "cancelled", "approve": "cancelled", "after": "cancelled"}
    assert view["error"] == {"code": "run_terminated", "operator": "ops-alice", "reason": "INC-42"}
    item = await runs.reviews.get(review_id)
    assert item["state"] == "expired" and item["history"][-1]["action"] == "withdrawn"
    with pytest.raises(HearthError) as late:
        await runs.reviews.decide(review_id, reviewer="teacher", decision="approve", reason="too late")
    assert late.value.code == "review_expired"
    slow_task = step(view, "slow")["task_id"]
    await until(lambda: _task_state_is(runs, slow_task, "killed"), what="the slow task to stop")
    await runs.advance(run_id)
    assert await runs.get(run_id) == {k: v for k, v in view.items() if k != "actions"}  # nothing moves it again
    with pytest.raises(HearthError) as again:
        await actions.terminate(run_id, OPS)
    assert again.value.code == "workflow_run_state_conflict"


async def _task_state_is(runs: RunService, task_id: str, state: str) -> bool:
    return bool((await runs.tasks.get(task_id, caller=None))["state"] == state)


async def test_rerun_resets_the_step_and_its_dependents_and_reopens_a_failed_run(
        actions: RunActions, tmp_path: Path) -> None:
    runs = actions.runs
    path = tmp_path / "later" / "log"  # its directory does not exist yet: step b fails
    await register(runs, [
        {"id": "a", "kind": "task", "task_type": "test.echo", "input": {"n": 1}},
        {"id": "b", "kind": "task", "task_type": "test.record", "needs": ["a"],
         "input": {"tag": "b", "path": str(path)}},
        {"id": "c", "kind": "task", "task_type": "test.echo", "needs": ["b"], "input": {"b": "${ $.steps.b.output }"}},
        {"id": "side", "kind": "task", "task_type": "test.echo", "needs": ["a"], "input": {}},
    ])
    run_id = await start(actions)
    failed = await finished(runs, run_id)
    assert failed["state"] == "failed" and states(failed)["b"] == "failed" and states(failed)["c"] == "skipped"
    side_cut = states(failed)["side"] == "cancelled"  # still running when b failed the run: it goes again
    assert states(failed)["side"] in ("succeeded", "cancelled")
    path.parent.mkdir()
    reopened = await actions.rerun(run_id, "b", OPS)  # (its steps may have run already when the action answers)
    assert reopened["state"] in ("running", "succeeded") and reopened["error"] is None
    assert step(reopened, "b")["round"] == 1 and step(reopened, "c")["round"] == 1
    assert step(reopened, "a")["round"] == 0  # upstream of b: its checkpoint is reused
    view = await finished(runs, run_id)
    assert view["state"] == "succeeded" and set(states(view).values()) == {"succeeded"}
    assert step(view, "c")["output"] == {"echo": {"b": {"tag": "b"}}}
    keys = await task_keys(runs.engine, run_id)
    assert sorted(keys) == sorted(f"wf:{run_id}:{k}" for k in ("a", "b", "b:1", "c:1", "side",
                                                                *(["side:1"] if side_cut else [])))
    audit = (await actions.view(run_id))["actions"][0]
    assert audit["action"] == "rerun" and audit["step_id"] == "b"
    assert audit["before"]["run"]["state"] == "failed" and audit["after"]["run"]["state"] == "running"
    assert audit["before"]["steps"]["b"]["state"] == "failed" and audit["before"]["steps"]["b"]["error"]
    assert set(audit["before"]["steps"]) == {"b", "c", *(["side"] if side_cut else [])}  # "a" was not touched

    again = await actions.rerun(run_id, "a", OPS)  # a succeeded run is reopened too; old checkpoints kept in audit
    assert step(again, "a")["round"] == 1 and step(again, "b")["round"] == 2
    assert step(again, "side")["round"] == (2 if side_cut else 1)
    last = (await actions.view(run_id))["actions"][-1]
    assert last["before"]["steps"]["c"]["output"] == {"echo": {"b": {"tag": "b"}}}
    assert set(last["after"]["steps"]) == {"a", "b", "c", "side"}
    assert (await finished(runs, run_id))["state"] == "succeeded"
    assert path.read_text().count("b ") == 2  # b ran once per rerun that reached it, never twice for one


async def test_skip_ends_a_step_and_the_steps_after_it_follow_their_join_rules(
        actions: RunActions, tmp_path: Path) -> None:
    runs = actions.runs
    await register(runs, [
        {"id": "broken", "kind": "task", "task_type": "test.record", "input": {"tag": "x", "path": str(tmp_path)}},
        # "other" ends only on a signal sent after the skip: were it a task, it could end before "broken" fails,
        # and the OR join would cancel "broken" (lost the race) — the run would succeed with no action at all.
        {"id": "other", "kind": "wait", "event": "go"},
        {"id": "all", "kind": "task", "task_type": "test.echo", "needs": ["broken", "other"], "input": {}},
        {"id": "any", "kind": "join", "join": "any", "needs": ["broken", "other"]},
    ])
    run_id = await start(actions)
    assert (await finished(runs, run_id))["state"] == "failed"
    view = await actions.skip(run_id, "broken", OPS)
    assert step(view, "broken")["state"] == "skipped" and step(view, "broken")["override"] == "skipped"
    await runs.signal(run_id, event="go", payload={"echo": {"n": 2}})
    view = await finished(runs, run_id)
    assert view["state"] == "succeeded"
    assert states(view) == {"broken": "skipped", "other": "succeeded", "all": "skipped", "any": "succeeded"}
    assert step(view, "any")["output"] == {"other": {"echo": {"n": 2}}}
    with pytest.raises(HearthError) as refused:
        await actions.skip(run_id, "other", OPS)
    assert refused.value.code == "workflow_run_state_conflict"  # a succeeded run: nothing left to skip


async def test_mark_succeeded_changes_execution_state_only_and_feeds_the_operator_output_downstream(
        actions: RunActions, tmp_path: Path) -> None:
    runs = actions.runs
    await register(runs, [
        {"id": "extract", "kind": "task", "task_type": "test.record", "input": {"tag": "x", "path": str(tmp_path)}},
        {"id": "use", "kind": "task", "task_type": "test.echo", "needs": ["extract"],
         "input": {"total": "${ $.steps.extract.output.total }"}},
    ])
    run_id = await start(actions)
    assert (await finished(runs, run_id))["state"] == "failed"
    view = await actions.mark_succeeded(run_id, "extract", OPS, output={"total": 12.5})
    marked = step(view, "extract")
    assert marked["state"] == "succeeded" and marked["override"] == "mark_succeeded"
    assert marked["output"] == {"total": 12.5}
    view = await finished(runs, run_id)
    assert view["state"] == "succeeded" and step(view, "use")["output"] == {"echo": {"total": 12.5}}
    # "use" was skipped (upstream_failed), then put back to waiting by the reopen: a new round
    assert sorted(await task_keys(runs.engine, run_id)) == [f"wf:{run_id}:extract", f"wf:{run_id}:use:1"]
    with pytest.raises(HearthError) as refused:
        await actions.rerun(run_id, "nope", OPS)
    assert refused.value.code == "workflow_step_not_found"


async def test_mark_succeeded_of_a_running_step_cancels_its_task(actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [{"id": "slow", "kind": "task", "task_type": "test.sleep", "input": {"ms": 20_000}},
                          {"id": "next", "kind": "task", "task_type": "test.echo", "needs": ["slow"], "input": {}}])
    run_id = await start(actions)
    slow_task = step(await runs.get(run_id), "slow")["task_id"]
    view = await actions.mark_succeeded(run_id, "slow", OPS)
    assert step(view, "slow")["output"] is None
    await until(lambda: _task_state_is(runs, slow_task, "killed"), what="the slow task to stop")
    assert (await finished(runs, run_id))["state"] == "succeeded"


@pytest.mark.parametrize(("operator", "reason", "param"), [("", "why", "operator"), ("ops", "  ", "reason")])
async def test_an_action_without_operator_or_reason_is_refused_and_writes_nothing(
        actions: RunActions, operator: str, reason: str, param: str) -> None:
    await register(actions.runs, [{"id": "slow", "kind": "task", "task_type": "test.sleep", "input": {"ms": 20_000}}])
    run_id = await start(actions)
    before = await actions.view(run_id)
    for act in (lambda a: actions.pause(run_id, a), lambda a: actions.terminate(run_id, a),
                lambda a: actions.rerun(run_id, "slow", a)):
        with pytest.raises(HearthError) as refused:
            await act(Audit(operator=operator, reason=reason))
        assert refused.value.code == "operator_reason_required" and refused.value.param == param
    after = await actions.view(run_id)
    assert after["actions"] == [] and after["state"] == "running" and after["epoch"] == before["epoch"]
    await actions.terminate(run_id, OPS)


async def test_actions_that_do_not_apply_are_409_and_unknown_runs_404(actions: RunActions) -> None:
    await register(actions.runs, [{"id": "a", "kind": "task", "task_type": "test.sleep", "input": {"ms": 20_000}},
                                  {"id": "b", "kind": "task", "task_type": "test.echo", "needs": ["a"], "input": {}}])
    run_id = await start(actions)
    with pytest.raises(HearthError) as refused:
        await actions.resume(run_id, OPS)  # not paused
    assert refused.value.code == "workflow_run_state_conflict" and refused.value.details["state"] == "running"
    await actions.pause(run_id, OPS)
    with pytest.raises(HearthError) as refused:
        await actions.rerun(run_id, "b", OPS)  # b never ran: nothing to rerun
    assert refused.value.code == "workflow_step_state_conflict" and refused.value.details["step"] == "b"
    await actions.resume(run_id, OPS)
    await actions.mark_succeeded(run_id, "a", OPS)
    view = await finished(actions.runs, run_id)
    for act in (actions.pause, actions.resume, actions.terminate):
        with pytest.raises(HearthError) as refused:
            await act(run_id, OPS)
        assert refused.value.code == "workflow_run_state_conflict"
    with pytest.raises(HearthError) as refused:
        await actions.mark_succeeded(run_id, "a", OPS)
    assert refused.value.code == "workflow_run_state_conflict"
    with pytest.raises(HearthError) as missing:
        await actions.pause("wfr_nope", OPS)
    assert missing.value.code == "workflow_run_not_found"
    assert [a["action"] for a in (await actions.view(run_id))["actions"]] == ["pause", "resume", "mark_succeeded"]
    assert view["state"] == "succeeded"


async def test_rerun_of_a_running_step_cancels_its_task_and_starts_a_new_one(actions: RunActions) -> None:
    runs = actions.runs
    await register(runs, [{"id": "slow", "kind": "task", "task_type": "test.sleep", "input": {"ms": 20_000}}])
    run_id = await start(actions)
    old_task = step(await runs.get(run_id), "slow")["task_id"]
    view = await actions.rerun(run_id, "slow", OPS)
    new_task = step(view, "slow")["task_id"]
    assert step(view, "slow")["state"] == "running" and step(view, "slow")["round"] == 1
    assert new_task not in (None, old_task)
    await until(lambda: _task_state_is(runs, old_task, "killed"), what="the old task to stop")
    assert (await runs.tasks.get(new_task, caller=None))["state"] in ("queued", "running")
    await actions.terminate(run_id, OPS)
