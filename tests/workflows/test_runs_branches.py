"""Error and timeout branches and step time limits in workflow runs — SQLite and PostgreSQL, a manual clock,
a real worker — and signals over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from hearth.workflows.runs import RunService
from tests.support import ADMIN
from tests.workflows.run_support import (
    clock_of,
    register,
    settle,
    start,
    states,
    step,
    step_is,
)


@pytest.mark.parametrize("fails", [True, False])
async def test_an_error_branch_runs_instead_of_failing_the_run(runs: RunService, fails: bool) -> None:
    await register(runs, [
        {"id": "charge", "kind": "task", "task_type": "test.record", "on_error": "refund",
         "input": {"tag": "c", **({} if fails else {"path": "/dev/null"})}},
        {"id": "receipt", "kind": "task", "task_type": "test.echo", "needs": ["charge"], "input": {}},
        {"id": "refund", "kind": "task", "task_type": "test.echo",
         "input": {"why": "${ $.steps.charge.output }"}},
    ])
    view = await settle(runs, await start(runs))
    assert view["state"] == "succeeded" and view["error"] is None
    if fails:
        assert states(view) == {"charge": "failed", "receipt": "skipped", "refund": "succeeded"}
        assert step(view, "receipt")["error"] == {"code": "upstream_failed"}
    else:
        assert states(view) == {"charge": "succeeded", "receipt": "succeeded", "refund": "skipped"}
        assert step(view, "refund")["error"] == {"code": "no_error"} and step(view, "refund")["task_id"] is None


@pytest.mark.parametrize("decision", [None, "reject"])
async def test_an_expired_approval_goes_to_its_timeout_branch_and_is_never_approved(
        runs: RunService, decision: str | None) -> None:
    await register(runs, [
        {"id": "review", "kind": "approval", "timeout_s": 60, "on_timeout": "escalate", "input": {"doc": 1}},
        {"id": "publish", "kind": "task", "task_type": "test.echo", "needs": ["review"], "input": {}},
        {"id": "escalate", "kind": "task", "task_type": "test.echo", "input": {"to": "manager"}},
    ])
    run_id = await start(runs)
    review_id = step(await runs.get(run_id), "review")["review_id"]
    if decision is None:
        clock_of(runs).advance(61)
        assert await runs.reviews.expire_due() == 1
    else:
        await runs.reviews.claim(review_id, reviewer="lead", lease_s=60)
        await runs.reviews.decide(review_id, reviewer="lead", decision=decision, reason="no")
    view = await settle(runs, run_id)
    assert step(view, "review")["error"]["code"] == ("review_expired" if decision is None else "review_rejected")
    assert states(view)["publish"] == "skipped" and step(view, "publish")["task_id"] is None
    if decision is None:  # the timeout branch handles an expiry: the run goes on
        assert view["state"] == "succeeded" and step(view, "escalate")["output"] == {"echo": {"to": "manager"}}
    else:  # a rejection is a failure, which on_timeout does not handle
        assert view["state"] == "failed" and states(view)["escalate"] == "skipped"


async def test_a_task_step_past_its_timeout_fails_and_its_task_is_cancelled(runs: RunService) -> None:
    await register(runs, [
        {"id": "slow", "kind": "task", "task_type": "test.sleep", "timeout_s": 30, "input": {"ms": 20_000}},
    ])
    run_id = await start(runs)
    view = await settle(runs, run_id, step_is("slow", "running"))
    clock_of(runs).advance(29)
    await runs.advance_all()
    assert step(await runs.get(run_id), "slow")["state"] == "running"
    clock_of(runs).advance(1)
    view = await settle(runs, run_id)
    assert view["state"] == "failed" and step(view, "slow")["error"]["code"] == "step_timeout"
    task = await runs.tasks.get(step(view, "slow")["task_id"], caller=None)
    assert task["cancel_requested"]


async def test_a_wait_for_an_event_that_does_not_come_times_out_into_its_error_branch(runs: RunService) -> None:
    await register(runs, [
        {"id": "reply", "kind": "wait", "event": "reply", "timeout_s": 3600, "on_error": "remind"},
        {"id": "remind", "kind": "task", "task_type": "test.echo", "input": {"n": 1}},
    ])
    run_id = await start(runs)
    clock_of(runs).advance(3600)
    view = await settle(runs, run_id)
    assert view["state"] == "succeeded"
    assert step(view, "reply")["error"]["code"] == "step_timeout" and states(view)["remind"] == "succeeded"


async def test_a_subworkflow_past_its_timeout_cancels_its_child_run(runs: RunService) -> None:
    await register(runs, [{"id": "hold", "kind": "wait", "event": "never"}], name="child")
    await register(runs, [{"id": "call", "kind": "subworkflow", "workflow": "child", "timeout_s": 10}])
    run_id = await start(runs)
    child_id = step(await runs.get(run_id), "call")["detail"]["run_id"]
    clock_of(runs).advance(10)
    view = await settle(runs, run_id)
    assert view["state"] == "failed" and step(view, "call")["error"]["code"] == "step_timeout"
    child = await runs.get(child_id)
    assert child["state"] == "cancelled" and states(child) == {"hold": "cancelled"}


async def test_a_signal_over_http_is_taken_by_the_waiting_step_and_a_second_is_refused(server: Any, http: Any) -> None:
    base = server.base_url + "/api/v1/workflows"
    definition = {"name": "approve-by-mail", "steps": [{"id": "mail", "kind": "wait", "event": "mail.reply"}]}
    assert (await http.post(base, json=definition, headers=ADMIN)).status_code == 201
    started = await http.post(f"{base}/approve-by-mail/runs", json={"caller": "tester", "input": {}}, headers=ADMIN)
    assert started.status_code == 201, started.text
    run_id = started.json()["data"]["id"]
    sent = await http.post(f"{base}/runs/{run_id}/signals", json={"event": "mail.reply", "payload": {"ok": True}},
                           headers=ADMIN)
    assert sent.status_code == 202, sent.text
    assert sent.json()["data"]["taken_by"] == "mail"
    run = (await http.get(f"{base}/runs/{run_id}", headers=ADMIN)).json()["data"]
    assert run["state"] == "succeeded" and run["steps"][0]["output"] == {"ok": True}
    again = await http.post(f"{base}/runs/{run_id}/signals", json={"event": "mail.reply"}, headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["code"] == "workflow_signal_unexpected"
    bad = await http.post(f"{base}/runs/{run_id}/signals", json={"event": "no spaces"}, headers=ADMIN)
    assert bad.status_code == 400
    missing = await http.post(f"{base}/runs/wfr_nope/signals", json={"event": "x"}, headers=ADMIN)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "workflow_run_not_found"
    anonymous = await http.post(f"{base}/runs/{run_id}/signals", json={"event": "x"})
    assert anonymous.status_code == 401
