"""The console's workflow, endpoint-test, canary, queues and quota-group pages in a real browser: headless Chromium
from the system packages driven by Playwright (the fixtures of ``tests/console/conftest.py``: nothing downloaded,
any browser-side error fails the test), against a Hearth server and the fake upstream.

Opens a run's graph and pauses the run through its form, tests an endpoint from the endpoints page, sets a
canary share on a prompt version, and saves a screenshot of each page (under the test's tmp dir; also under
``HEARTH_TEST_SCREENSHOT_DIR`` when set).
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from tests.support import ADMIN

# the shared browser lives on the session's event loop (tests/console/conftest.py)
pytestmark = pytest.mark.asyncio(loop_scope="session")

GATED = {"name": "gated", "steps": [
    {"id": "prepare", "kind": "task", "task_type": "test.echo", "input": {"plan": "${ $.input.plan }"}},
    {"id": "gate", "kind": "approval", "timeout_s": 3600, "needs": ["prepare"], "input": {"plan": "p"}},
    {"id": "notify", "kind": "task", "task_type": "test.noop", "needs": ["prepare"]},
    {"id": "done", "kind": "join", "needs": ["gate", "notify"]},
]}


def _registry(fake: Any) -> dict[str, Any]:
    return {
        "providers": [{"name": "openai-like", "kind": "openai"}],
        "quota_groups": [{"name": "acct", "rpm": 100, "tpm": 100_000}],
        "endpoints": [{"name": "ep-a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
                       "api_key": "sk-live-SECRET-0123456789abcdef", "quota_group": "acct"}],
        "models": [{"name": "m", "endpoints": ["ep-a"]}],
        "callers": [{"name": "tester", "key": "test-key-123"}],
    }


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    """No embedded worker: a run's first step stays running, so the run waits for the operator."""
    return hearth_server(_registry(fake), database_url=database_url,
                         task_modules=["hearth.testing.task_types:register"], embedded_worker=False)


async def test_open_a_runs_graph_and_pause_it_with_a_reason(server, page, shots):
    from playwright.async_api import expect

    async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as api:
        assert (await api.post("/api/v1/workflows", json=GATED)).status_code in (200, 201)
        r = await api.post("/api/v1/workflows/gated/runs", json={"caller": "tester", "input": {"plan": "p1"}})
        run_id = r.json()["data"]["id"]
    await page.click("header nav a[href='/console/workflows']")
    await expect(page.locator("tr[data-workflow='gated']")).to_contain_text("gated")
    await shots.take(page, "workflows")
    await page.click("header nav a[href='/console/runs']")
    await page.select_option("select[name=state]", "running")
    await page.click("form.filters button")
    await shots.take(page, "runs")
    await page.click(f"a[href='/console/runs/{run_id}']")
    graph = page.locator("svg.run-graph")
    await expect(graph.locator("g.node")).to_have_count(4)
    await expect(graph.locator("g.node[data-step='prepare']")).to_have_attribute("data-state", "running")
    await expect(graph.locator("path.edge")).to_have_count(4)
    box_prepare = await graph.locator("g.node[data-step='prepare'] rect").bounding_box()
    box_done = await graph.locator("g.node[data-step='done'] rect").bounding_box()
    assert box_prepare and box_done and box_done["x"] > box_prepare["x"]  # layered left to right
    await page.get_by_role("button", name="Pause run").click()  # no reason: the browser refuses to send it
    await expect(page.get_by_test_id("run-state")).to_have_text("running")
    await page.locator("form.run-actions input[name=reason]").fill("upstream maintenance")
    await shots.take(page, "run")
    await page.get_by_role("button", name="Pause run").click()
    await expect(page.locator(".flash.notice")).to_have_text("Pause: the run is paused.")
    await expect(page.get_by_test_id("run-state")).to_have_text("paused")
    await expect(page.locator("table.actions")).to_contain_text("upstream maintenance")
    await expect(page.get_by_role("button", name="Resume run")).to_be_visible()
    await shots.take(page, "run-paused")
    async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as api:
        view = (await api.get(f"/api/v1/workflows/runs/{run_id}")).json()["data"]
    assert view["state"] == "paused"
    assert [(a["action"], a["operator"], a["reason"]) for a in view["actions"]] == [
        ("pause", "admin", "upstream maintenance")]


async def test_test_an_endpoint_and_see_the_outcome(fake, server, page, shots):
    from playwright.async_api import expect

    await page.click("header nav a[href='/console/endpoints']")
    row = page.locator("tr[data-endpoint='ep-a']")
    minute = int(time.time() // 60)  # the quota group counts this minute's requests (read below)
    await row.get_by_role("button", name="Test").click()
    await expect(page.locator(".flash.notice")).to_contain_text("ep-a answered 200 in")
    await expect(row.locator("td.last-test")).to_contain_text("by admin")
    assert fake.stats.requests == 1
    await shots.take(page, "endpoints-tested")
    await row.get_by_role("button", name="Test").click()  # within the minute: refused, nothing sent
    await expect(page.locator(".flash.error")).to_contain_text("next test allowed in")
    assert fake.stats.requests == 1
    await page.click("a[href='/console/quota-groups#qg-acct']")
    rpm = page.locator("tr[data-group='acct'] td.rpm")
    await expect(rpm).to_have_text(re.compile(r"^[01] / 100$"))
    if int(time.time() // 60) == minute:  # read within the test's minute (else a new minute rightly shows 0)
        assert await rpm.text_content() == "1 / 100"
    await shots.take(page, "quota-groups")
    await page.click("header nav a[href='/console/queues']")
    await expect(page.locator("tr[data-queue='ai.default']")).to_be_visible()
    await shots.take(page, "queues")


async def test_set_a_canary_share_on_a_prompt_version(server, page, shots):
    from playwright.async_api import expect

    async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as api:
        for text in ("Say hello to {{ name }}.", "Greet {{ name }} warmly."):
            r = await api.post("/api/v1/prompts", json={"code": "greet", "contents": {"en": text},
                                                        "variables": [{"name": "name"}]})
            assert r.status_code == 201, r.text
    await page.goto("/console/prompts/greet")
    await expect(page.get_by_test_id("canary-state")).to_contain_text("No canary")
    form = page.locator("form.set-canary")
    await form.locator("select[name=version]").select_option("2")
    await form.locator("input[name=percent]").fill("10")
    await form.locator("input[name=reason]").fill("try the warmer tone on a tenth")
    await form.get_by_role("button", name="Set canary share").click()
    await expect(page.locator(".flash.notice")).to_have_text("Version 2 serves 10 % of requests.")
    await expect(page.get_by_test_id("canary-state")).to_have_text("Version 2 serves 10.0 % of requests.")
    await expect(page.locator("section[data-version='2'] h2")).to_contain_text("canary 10.0 %")
    await expect(page.locator("table.list").last).to_contain_text("share=0.1: try the warmer tone on a tenth")
    await expect(page.get_by_test_id("version-stats")).to_contain_text("No calls in the last 24 hours.")
    await shots.take(page, "prompt-canary")
    async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as api:
        prompt = (await api.get("/api/v1/prompts/greet")).json()["data"]
    assert next(v for v in prompt["versions"] if v["version"] == 2)["canary_share"] == 0.1
