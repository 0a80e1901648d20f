"""The console's workflow pages: the runs listing's keyset pages (every run once, newest first, with and without a
state filter, on SQLite and PostgreSQL), the run graph's layered layout and escaping, and over real HTTP the
definitions list, the runs list and one run's page — its graph, steps and operator actions (with a reason, the
signed-in user as operator, the same audit as the admin API; refused without a reason or below the operator
role)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from hearth.console.passwords import hash_password
from hearth.console.run_graph import layers, layout, run_graph
from hearth.workflows.definitions import Edge
from tests.console.console_client import csrf_of, page_token, sign_in
from tests.support import ADMIN, gateway_registry

GATED = {"name": "gated", "steps": [
    {"id": "prepare", "kind": "task", "task_type": "test.echo", "input": {"plan": "${ $.input.plan }"}},
    {"id": "gate", "kind": "approval", "timeout_s": 3600, "needs": ["prepare"], "input": {"plan": "p"}},
    {"id": "done", "kind": "join", "needs": ["gate"]},
]}
VIEWER = {"name": "vera", "role": "viewer", "password_hash": hash_password("viewer-password-1")}


def _edge(source: str, target: str, kind: str = "needs") -> Edge:
    return Edge(source, target, kind, "")


def test_a_steps_column_is_its_longest_path_and_rows_keep_declaration_order():
    edges = [_edge("a", "b"), _edge("a", "c"), _edge("b", "d"), _edge("c", "d"), _edge("a", "d"),
             _edge("d", "fix", "on_error")]
    assert layers(["a", "b", "c", "d", "fix"], edges) == {"a": 0, "b": 1, "c": 1, "d": 2, "fix": 3}
    nodes = layout([(s, "task", "waiting") for s in ("a", "b", "c", "d", "fix")], edges)
    assert [(n.step_id, n.column, n.row) for n in nodes] == [("a", 0, 0), ("b", 1, 0), ("c", 1, 1), ("d", 2, 0),
                                                             ("fix", 3, 0)]
    assert layers(["x", "y"], [_edge("x", "y"), _edge("y", "x")])  # a cycle ends (a definition never has one)


def test_the_graph_colours_steps_by_state_labels_odd_edges_and_escapes_names():
    svg = str(run_graph([("a<b>", "task", "succeeded"), ("fix", "task", "failed")], [_edge("a<b>", "fix", "on_error")]))
    assert "<b>" not in svg and "a&lt;b&gt;" in svg
    assert 'class="node s-succeeded"' in svg and 'class="node s-failed"' in svg
    assert svg.count("<path class=\"edge e-on_error\"") == 1 and ">on_error</text>" in svg
    assert 'href="#step-fix"' in svg


async def test_runs_pages_cover_every_run_once_newest_first(engine):
    from hearth.store.tables import workflow_runs
    from hearth.workflows.run_store import runs_page

    states = ["running", "failed", "running", "succeeded", "running", "paused", "running"]
    async with engine.begin() as conn:
        await conn.execute(workflow_runs.insert(), [
            {"id": f"wfr_{i}", "workflow": "w", "version": 1, "caller": "c", "input": {}, "state": state,
             "created_at": 1000.0 + (i // 2), "updated_at": 2000.0 - i} for i, state in enumerate(states)])
    newest_first = sorted(range(len(states)), key=lambda i: (i // 2, f"wfr_{i}"), reverse=True)  # ties: by id
    for state in (None, "running"):
        seen, cursor = [], None
        while True:
            rows, cursor = await runs_page(engine, state=state, before=cursor, limit=2)
            assert len(rows) <= 2
            seen += [r["id"] for r in rows]
            if cursor is None:
                break
        assert seen == [f"wfr_{i}" for i in newest_first if state in (None, states[i])], state


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    """No embedded worker: ``prepare``'s task stays queued, so the run waits there for the operator."""
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    return hearth_server(registry, database_url=database_url, task_modules=["hearth.testing.task_types:register"],
                         embedded_worker=False, console_users=[VIEWER])


async def _start(server: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as api:
        assert (await api.post("/api/v1/workflows", json=GATED)).status_code in (200, 201)
        r = await api.post("/api/v1/workflows/gated/runs", json={"caller": "tester", "input": {"plan": "p1"}})
        assert r.status_code == 201, r.text
        run: dict[str, Any] = r.json()["data"]
    return run


async def test_the_run_page_shows_the_graph_and_acts_with_a_reason_as_the_signed_in_user(server):
    run = await _start(server)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        await sign_in(client)
        listed = (await client.get("/console/workflows")).text
        assert 'data-workflow="gated"' in listed
        runs = (await client.get("/console/runs", params={"state": "running"})).text
        assert f'data-run="{run["id"]}"' in runs
        assert f'data-run="{run["id"]}"' not in (await client.get("/console/runs?state=failed")).text
        assert (await client.get("/console/runs?state=bogus")).status_code == 400
        page = await client.get(f"/console/runs/{run['id']}")
        assert page.status_code == 200
        states = dict(re.findall(r'data-step="([^"]+)" data-state="([^"]+)"', page.text))
        assert states == {"prepare": "running", "gate": "waiting", "done": "waiting"}
        assert page.text.count('class="edge e-needs"') == 2
        task_id = next(s for s in run["steps"] if s["step_id"] == "prepare")["task_id"]
        assert f'href="/console/tasks/{task_id}"' in page.text and "attempt 0 / " in page.text
        token = csrf_of(page.text)

        no_reason = await client.post(f"/console/runs/{run['id']}/pause", data={"csrf": token, "reason": " "})
        assert "error=A+reason+is+required" in no_reason.headers["location"]
        paused = await client.post(f"/console/runs/{run['id']}/pause", data={"csrf": token, "reason": "ticket 9"})
        assert paused.status_code == 303 and "the+run+is+paused" in paused.headers["location"]
        skipped = await client.post(f"/console/runs/{run['id']}/steps/gate/skip",
                                    data={"csrf": token, "reason": "not needed"})
        assert "Step+gate" in skipped.headers["location"], skipped.headers["location"]
        conflict = await client.post(f"/console/runs/{run['id']}/steps/gate/skip",
                                     data={"csrf": token, "reason": "again"})
        assert "error=Cannot+skip+a+skipped+step" in conflict.headers["location"]
        shown = (await client.get(f"/console/runs/{run['id']}")).text
        assert "ticket 9" in shown and "not needed" in shown
    async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as api:
        view = (await api.get(f"/api/v1/workflows/runs/{run['id']}")).json()["data"]
    assert view["state"] == "paused"
    assert [(a["action"], a["step_id"], a["operator"], a["reason"]) for a in view["actions"]] == [
        ("pause", None, "admin", "ticket 9"), ("skip", "gate", "admin", "not needed")]


async def test_a_viewer_sees_runs_but_cannot_act(server):
    run = await _start(server)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as viewer:
        await sign_in(viewer, "vera", "viewer-password-1")
        token = await page_token(viewer, f"/console/runs/{run['id']}")
        assert "Pause run" not in (await viewer.get(f"/console/runs/{run['id']}")).text
        refused = await viewer.post(f"/console/runs/{run['id']}/pause", data={"csrf": token, "reason": "r"})
        assert refused.status_code == 403
    async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as api:
        assert (await api.get(f"/api/v1/workflows/runs/{run['id']}")).json()["data"]["state"] == "running"
