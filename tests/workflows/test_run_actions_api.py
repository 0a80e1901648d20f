"""Operator actions and the event stream of workflow runs over real HTTP (admin), on SQLite and PostgreSQL: each
action audited in the run's ``actions``, 400/404/409 with stable codes and nothing written, terminate withdrawing
review items, and ``/events`` following a run to its end and resuming after ``Last-Event-ID``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest

from tests.support import ADMIN, AUTH, gateway_registry

WORKFLOWS = "/api/v1/workflows"
RUNS = "/api/v1/workflows/runs"
REVIEWS = "/api/v1/reviews"
OPS = {"operator": "ops-dana", "reason": "ticket 7"}
GATED = {"name": "gated", "steps": [
    {"id": "gate", "kind": "approval", "timeout_s": 3600, "input": {"plan": "${ $.input.plan }"}},
    {"id": "done", "kind": "join", "needs": ["gate"]},
]}


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    """The scheduler moves runs on every 0.1 s; the steps here are approvals and joins (no worker needed)."""
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    return hearth_server(registry, database_url=database_url, task_modules=["hearth.testing.task_types:register"],
                         embedded_worker=False, scheduler_interval_s=0.1, sse_heartbeat_s=0.4)


async def start_run(server: Any, http: httpx.AsyncClient) -> dict[str, Any]:
    r = await http.post(server.base_url + WORKFLOWS, json=GATED, headers=ADMIN)
    assert r.status_code in (200, 201), r.text
    r = await http.post(f"{server.base_url}{WORKFLOWS}/gated/runs", json={"caller": "tester",
                                                                         "input": {"plan": "p1"}}, headers=ADMIN)
    assert r.status_code == 201, r.text
    data: dict[str, Any] = r.json()["data"]
    return data


def step_of(run: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in run["steps"] if s["step_id"] == step_id)


async def test_pause_resume_terminate_over_http_are_audited_and_terminate_withdraws_the_review(
        server: Any, http: httpx.AsyncClient) -> None:
    run = await start_run(server, http)
    url = f"{server.base_url}{RUNS}/{run['id']}"
    paused = await http.post(url + "/pause", json=OPS, headers=ADMIN)
    assert paused.status_code == 200 and paused.json()["data"]["state"] == "paused"
    resumed = await http.post(url + "/resume", json=OPS, headers=ADMIN)
    assert resumed.status_code == 200 and resumed.json()["data"]["state"] == "running"
    ended = await http.post(url + "/terminate", json=OPS, headers=ADMIN)
    assert ended.status_code == 200 and ended.json()["data"]["state"] == "terminated"
    view = (await http.get(url, headers=ADMIN)).json()["data"]
    assert [(a["action"], a["operator"], a["reason"]) for a in view["actions"]] == [
        ("pause", "ops-dana", "ticket 7"), ("resume", "ops-dana", "ticket 7"), ("terminate", "ops-dana", "ticket 7")]
    assert view["actions"][2]["after"]["steps"]["gate"]["state"] == "cancelled"
    item = (await http.get(f"{server.base_url}{REVIEWS}/{step_of(run, 'gate')['review_id']}",
                           headers=ADMIN)).json()["data"]
    assert item["state"] == "expired" and item["history"][-1]["action"] == "withdrawn"
    again = await http.post(url + "/resume", json=OPS, headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["code"] == "workflow_run_state_conflict"


@pytest.mark.parametrize(("path", "body", "status", "code"), [
    ("/pause", {}, 400, "operator_reason_required"),
    ("/pause", {"operator": "ops"}, 400, "operator_reason_required"),
    ("/terminate", {"operator": "", "reason": "r"}, 400, "operator_reason_required"),
    ("/pause", {**OPS, "force": True}, 400, "invalid_request"),
    ("/steps/gate/skip", {"reason": "r"}, 400, "operator_reason_required"),
    ("/steps/nope/rerun", OPS, 404, "workflow_step_not_found"),
    ("/steps/done/rerun", OPS, 409, "workflow_step_state_conflict"),
    ("/steps/gate/skip", OPS, 409, "workflow_step_state_conflict"),
    ("/resume", OPS, 409, "workflow_run_state_conflict"),
])
async def test_a_refused_action_is_a_stable_code_and_writes_nothing(
        server: Any, http: httpx.AsyncClient, path: str, body: dict[str, Any], status: int, code: str) -> None:
    run = await start_run(server, http)
    url = f"{server.base_url}{RUNS}/{run['id']}"
    before = (await http.get(url, headers=ADMIN)).json()["data"]
    r = await http.post(url + path, json=body, headers=ADMIN)
    assert r.status_code == status and r.json()["error"]["code"] == code, r.text
    after = (await http.get(url, headers=ADMIN)).json()["data"]
    assert after["actions"] == [] and after["epoch"] == before["epoch"] and after["steps"] == before["steps"]


async def test_unknown_runs_are_404_and_actions_need_the_admin_token(server: Any, http: httpx.AsyncClient) -> None:
    url = f"{server.base_url}{RUNS}/wfr_missing"
    for r in (await http.get(url, headers=ADMIN), await http.post(url + "/pause", json=OPS, headers=ADMIN),
              await http.get(url + "/events", headers=ADMIN)):
        assert r.status_code == 404 and r.json()["error"]["code"] == "workflow_run_not_found"
    assert (await http.post(url + "/pause", json=OPS, headers=AUTH)).status_code in (401, 403)


async def test_mark_succeeded_over_http_feeds_the_output_on(server: Any, http: httpx.AsyncClient) -> None:
    run = await start_run(server, http)
    url = f"{server.base_url}{RUNS}/{run['id']}"
    r = await http.post(url + "/steps/gate/mark-succeeded", json={**OPS, "output": {"plan": "by hand"}},
                        headers=ADMIN)
    assert r.status_code == 200, r.text
    assert step_of(r.json()["data"], "gate")["override"] == "mark_succeeded"
    view = r.json()["data"]
    assert view["state"] == "succeeded" and step_of(view, "done")["output"] == {"gate": {"plan": "by hand"}}


async def read_events(http: httpx.AsyncClient, url: str, headers: dict[str, str],
                      seen: asyncio.Queue[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every event and comment of the stream, until it ends."""
    out: list[dict[str, Any]] = []
    async with http.stream("GET", url, headers=headers, timeout=20) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        current: dict[str, Any] = {}
        async for line in r.aiter_lines():
            if line.startswith(":"):
                out.append({"comment": line})
            elif line.startswith("id: "):
                current["id"] = int(line[4:])
            elif line.startswith("event: "):
                current["event"] = line[7:]
            elif line.startswith("data: "):
                current["data"] = orjson.loads(line[6:])
            elif line == "" and current:
                out.append(current)
                if seen is not None:
                    seen.put_nowait(current)
                current = {}
    return out


async def test_events_follow_a_run_to_its_end_and_resume_after_last_event_id(
        server: Any, http: httpx.AsyncClient) -> None:
    run = await start_run(server, http)
    url = f"{server.base_url}{RUNS}/{run['id']}"
    seen: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    reading = asyncio.create_task(read_events(http, url + "/events", ADMIN, seen))
    assert (await asyncio.wait_for(seen.get(), 10))["event"] == "snapshot"
    await http.post(url + "/pause", json=OPS, headers=ADMIN)
    await http.post(url + "/resume", json=OPS, headers=ADMIN)
    review_id = step_of(run, "gate")["review_id"]
    await asyncio.sleep(1.0)  # quiet for longer than the 0.4 s heartbeat
    assert (await http.post(f"{server.base_url}{REVIEWS}/{review_id}/claim", json={"reviewer": "t"},
                            headers=ADMIN)).status_code == 200
    decided = await http.post(f"{server.base_url}{REVIEWS}/{review_id}/decide",
                              json={"reviewer": "t", "decision": "approve", "reason": "ok"}, headers=ADMIN)
    assert decided.status_code == 200
    events = await asyncio.wait_for(reading, 15)  # the stream ends by itself when the run does
    named = [e for e in events if "event" in e]
    assert [e["id"] for e in named] == list(range(1, len(named) + 1))
    assert [e["data"]["action"] for e in named if e["event"] == "action"] == ["pause", "resume"]
    runs_seen = [e["data"]["state"] for e in named if e["event"] == "run"]
    assert runs_seen[-1] == "succeeded" and named[-1]["event"] == "run"
    assert {"comment": ": heartbeat"} in events
    gate = [e["data"] for e in named if e["event"] == "step" and e["data"]["step_id"] == "gate"]
    assert gate[-1]["state"] == "succeeded" and gate[-1]["output"] == {"plan": "p1"}

    resumed = await read_events(http, url + "/events", {**ADMIN, "Last-Event-ID": str(named[-1]["id"])})
    assert [(e["id"], e["event"]) for e in resumed] == [(named[-1]["id"] + 1, "snapshot")]
    assert resumed[0]["data"]["state"] == "succeeded"
    bad = await http.get(url + "/events", headers={**ADMIN, "Last-Event-ID": "abc"})
    assert bad.status_code == 400
