"""The console in a real browser: headless Chromium from the system packages, driven by Playwright
(``executable_path``: nothing is downloaded), against a Hearth server and the fake upstream.

Signs in, sees an endpoint cooling down after the upstream answered 429, redrives a dead letter, decides a
review item and activates a prompt version — each through the pages' own forms — and saves a screenshot of
every page (under the test's tmp dir; also under ``HEARTH_TEST_SCREENSHOT_DIR`` when set, which is how the
images in docs/images/ were made). A page that logs a browser error (a script or a resource refused by the
Content Security Policy, a missing asset) fails the test: the console must work offline, from its own files.

Without a chromium binary the tests are skipped, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hearth.testing.fake_upstream import FakeBehavior
from tests.support import ADMIN, AUTH, chat_body, request_log_row
from tests.tasks.api_helpers import TASKS, finished

# the shared browser lives on the session's event loop (tests/console/conftest.py)
pytestmark = pytest.mark.asyncio(loop_scope="session")

TEXT = "Hearth runs long AI jobs. They survive crashes. Results are kept."


def _registry(fake: Any) -> dict[str, Any]:
    return {
        "providers": [{"name": "openai-like", "kind": "openai"}],
        "endpoints": [{"name": "ep-a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
                       "api_key": "sk-live-SECRET-0123456789abcdef"}],
        "models": [{"name": "m", "endpoints": ["ep-a"]}],
        "prices": [{"model": "up", "input_per_1m": 1000.0, "output_per_1m": 1000.0}],
        "callers": [{"name": "tester", "key": "test-key-123"}],
    }


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    """On SQLite and on PostgreSQL: the pages read through the same services on both."""
    return hearth_server(_registry(fake), database_url=database_url, task_poll_s=0.1, task_reap_s=0.2)


async def test_sign_in_and_every_page_renders_from_the_consoles_own_files(browser, server, page, shots):
    from playwright.async_api import expect

    context = await browser.new_context(base_url=server.base_url)
    anonymous = await context.new_page()
    await anonymous.goto("/console/login")
    await shots.take(anonymous, "login")
    await anonymous.fill("input[name=secret]", "not-the-token")
    await anonymous.click("button[type=submit]")
    await expect(anonymous.locator(".flash.error")).to_have_text("Wrong name or secret.")
    cookies = await context.cookies()
    assert not [c for c in cookies if c["name"] == "hearth_console"]
    await context.close()

    cookie = next(c for c in await page.context.cookies() if c["name"] == "hearth_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert await page.evaluate("document.cookie") == ""  # HttpOnly: no script can read the session
    await expect(page.get_by_test_id("user")).to_have_text("admin · admin")
    await shots.take(page, "overview-empty")
    for slug, heading in (("endpoints", "Endpoints"), ("request-logs", "Request logs"), ("tasks", "Tasks"),
                          ("dead-letters", "Dead letters"),
                          ("reviews", "Review queue"), ("prompts", "Prompts"), ("schedules", "Schedules"),
                          ("budgets", "Budgets"), ("playground", "Chat playground")):
        await page.click(f"header nav a[href='/console/{slug}']")
        await expect(page.locator("h1")).to_have_text(heading)
        await shots.take(page, slug)
    await page.click("text=Sign out")
    await page.wait_for_url("**/console/login**")
    await page.goto("/console/overview")
    assert "/console/login" in page.url


async def test_the_overview_charts_recent_traffic_and_errors(fake, server, page, shots):
    from playwright.async_api import expect

    fake.script(FakeBehavior(status=400), FakeBehavior(status=400))
    async with httpx.AsyncClient() as http:
        statuses = []
        for i in range(8):
            r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(f"hello {i}"), headers=AUTH)
            statuses.append(r.status_code)
        assert sorted(statuses) == [200] * 6 + [400] * 2
        await request_log_row(http, server, r.headers["x-request-id"])  # the writer has flushed the last one
    await page.goto("/console/overview?window=15m")
    await expect(page.get_by_test_id("calls")).to_have_text("8")
    await expect(page.locator(".stats")).to_contain_text("errors (25.0 %)")
    assert await page.locator("svg.chart").count() == 5  # calls, errors, cost, tokens, latency p95
    assert await page.locator("svg.chart rect[height]:not([height='0.0'])").count() >= 3
    await shots.take(page, "overview")
    await page.click("header nav a[href='/console/usage']")  # the same calls per caller, from the rollups
    await expect(page.locator("h1")).to_have_text("Callers & usage")
    await expect(page.locator("tr[data-group='tester'] td.calls")).to_have_text("8")
    await shots.take(page, "usage")
    await page.click("header nav a[href='/console/request-logs']")
    await expect(page.locator("tr[data-request]")).to_have_count(8)
    await page.fill("input[name=status]", "400")
    await page.click("form.filters button")
    await expect(page.locator("tr[data-request]")).to_have_count(2)
    await shots.take(page, "request-logs")
    await page.locator("tr[data-request] a").first.click()
    await expect(page.locator("h1")).to_contain_text("400")
    await expect(page.locator("table.list")).to_contain_text("upstream_rejected_request")  # its one attempt
    await shots.take(page, "request-log")


async def test_an_endpoint_cooling_down_after_a_429_shows_so_and_can_be_disabled(fake, server, page, shots):
    from playwright.async_api import expect

    fake.script(FakeBehavior(status=429, retry_after=30))
    async with httpx.AsyncClient() as http:
        r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
        assert r.status_code == 429
        r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
        assert r.status_code in (429, 503)  # the endpoint is cooling down: not called again
    assert fake.stats.requests == 1
    await page.goto("/console/endpoints")
    row = page.locator("tr[data-endpoint='ep-a']")
    await expect(row.locator("td.state")).to_contain_text("cooling down")
    cooldown = float((await row.locator("td.cooldown").inner_text()).split()[0])
    assert 0 < cooldown <= 30
    assert "SECRET" not in await page.content()
    await shots.take(page, "endpoints-cooldown")
    await row.get_by_role("button", name="Disable").click()
    await expect(page.locator(".flash.notice")).to_have_text("ep-a disabled.")
    await expect(row.locator("td.state")).to_contain_text("disabled")
    assert not server.runtime.gateway.registry.endpoints["ep-a"].enabled
    await row.get_by_role("button", name="Enable").click()
    await expect(row.locator("td.state")).to_contain_text("healthy")  # enabling lifts the cooldown too


async def test_redrive_a_dead_letter_with_a_reason(fake, server, page, shots):
    from playwright.async_api import expect

    fake.set_defaults(status=400)
    async with httpx.AsyncClient() as http:
        task_id = (await http.post(server.base_url + TASKS, headers=AUTH, json={
            "task_type": "summarize_async", "payload": {"text": TEXT, "model": "m"}})).json()["data"]["task_id"]
        assert (await finished(http, server, task_id))["state"] == "failed"
    fake.set_defaults(status=200)
    await page.goto("/console/dead-letters?status=OPEN")
    await page.click(f"a[href='/console/dead-letters/{task_id}']")
    await expect(page.get_by_test_id("status")).to_have_text("OPEN")
    await page.fill("input[name=reason]", "upstream fixed")
    await shots.take(page, "dead-letter")
    await page.get_by_role("button", name="Redrive").click()
    await expect(page.locator(".flash.notice")).to_have_text("Dead letter redriven.")
    await expect(page.locator("table.list")).to_contain_text("upstream fixed")
    async with httpx.AsyncClient() as http:
        assert (await finished(http, server, task_id))["state"] == "succeeded"
        letter = (await http.get(f"{server.base_url}/api/v1/ai/dead-letters/{task_id}", headers=ADMIN)).json()["data"]
        redrive = next(h for h in letter["history"] if h["action"] == "redrive")
        assert redrive["operator"] == "admin" and redrive["reason"] == "upstream fixed"
        assert letter["status"] == "RESOLVED"  # the redriven attempt succeeded
    await page.goto(f"/console/tasks/{task_id}")
    await expect(page.locator("h1 .badge")).to_have_text("succeeded")
    await shots.take(page, "task")
    await page.get_by_role("button", name="Replay as a new task").click()
    await expect(page.locator(".flash.notice")).to_have_text(f"Replay of {task_id}.")
    replay_id = page.url.split("/console/tasks/", 1)[1].split("?", 1)[0]
    assert replay_id != task_id
    async with httpx.AsyncClient() as http:
        replayed = await finished(http, server, replay_id)
    assert replayed["state"] == "succeeded" and replayed["replay_of"] == task_id


async def test_decide_a_review_item_with_its_payload_shown(server, page, shots):
    from playwright.async_api import expect

    async with httpx.AsyncClient() as http:
        r = await http.post(server.base_url + "/api/v1/reviews", headers=ADMIN, json={
            "title": "Approve the lesson plan for 3B", "payload": {"plan": "fractions with pizza"},
            "evidence": [{"source_page": 3, "quote": "pizza"}], "timeout_s": 3600})
        review_id = r.json()["data"]["id"]
    await page.goto("/console/reviews")
    await page.click("text=Approve the lesson plan for 3B")
    await expect(page.get_by_test_id("payload")).to_contain_text("fractions with pizza")
    await page.get_by_role("button", name="Claim to decide").click()
    await expect(page.get_by_test_id("state")).to_have_text("claimed")
    await page.check("input[name=decision][value=approve]")
    await page.fill("input[name=reason]", "matches the curriculum")
    await shots.take(page, "review")
    await page.get_by_role("button", name="Submit decision").click()
    await expect(page.locator(".flash.notice")).to_have_text("Decided: approve.")
    await expect(page.get_by_test_id("state")).to_have_text("approved")
    async with httpx.AsyncClient() as http:
        item = (await http.get(f"{server.base_url}/api/v1/reviews/{review_id}", headers=ADMIN)).json()["data"]
    assert item["state"] == "approved" and item["decided_by"] == "admin" and item["reason"] == "matches the curriculum"


async def test_activate_a_prompt_version_with_a_reason(server, page, shots):
    from playwright.async_api import expect

    async with httpx.AsyncClient() as http:
        for text in ("Say hello to {{ name }}.", "Greet {{ name }} warmly."):
            r = await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
                "code": "greet", "contents": {"en": text}, "variables": [{"name": "name"}]})
            assert r.status_code == 201, r.text
    await page.goto("/console/prompts")
    await page.click("a[href='/console/prompts/greet']")
    await expect(page.get_by_test_id("active-version")).to_have_text("1")
    version2 = page.locator("section[data-version='2']")
    await expect(version2).to_contain_text("Greet {{ name }} warmly.")
    await version2.locator("details.diff summary").click()  # what activating it would change
    await expect(version2.locator(".diff .ddel")).to_contain_text("Say hello to {{ name }}.")
    await expect(version2.locator(".diff .dadd")).to_contain_text("Greet {{ name }} warmly.")
    await version2.get_by_role("button", name="Activate version 2").click()  # no reason: the browser refuses
    await expect(page.get_by_test_id("active-version")).to_have_text("1")
    await version2.locator("input[name=reason]").fill("warmer tone")
    await version2.get_by_role("button", name="Activate version 2").click()
    await expect(page.locator(".flash.notice")).to_have_text("Version 2 is active.")
    await expect(page.get_by_test_id("active-version")).to_have_text("2")
    await expect(page.locator("table.list")).to_contain_text("warmer tone")
    await shots.take(page, "prompt")
    async with httpx.AsyncClient() as http:
        prompt = (await http.get(server.base_url + "/api/v1/prompts/greet", headers=ADMIN)).json()["data"]
    assert prompt["active_version"] == 2
    activated = next(h for h in prompt["history"] if h["action"] == "activated")
    assert activated["version"] == 2 and activated["operator"] == "admin" and activated["reason"] == "warmer tone"


async def test_pause_resume_and_trigger_a_schedule(server, page, shots):
    from playwright.async_api import expect

    async with httpx.AsyncClient() as http:
        r = await http.post(server.base_url + "/api/v1/schedules", headers=ADMIN, json={
            "name": "morning-summary", "caller": "tester", "cron": "0 8 * * *", "time_zone": "UTC",
            "target": {"task_type": "summarize_async", "payload": {"text": TEXT, "model": "m"}}})
        assert r.status_code == 201, r.text
    await page.click("header nav a[href='/console/schedules']")
    row = page.locator("tr[data-schedule='morning-summary']")
    await expect(row).to_contain_text("08:00:00")
    await row.locator("a").click()
    await expect(page.get_by_test_id("state")).to_have_text("active")
    await page.get_by_role("button", name="Pause").click()
    await expect(page.get_by_test_id("state")).to_have_text("paused")
    await page.get_by_role("button", name="Resume").click()
    await expect(page.get_by_test_id("state")).to_have_text("active")
    await page.get_by_role("button", name="Trigger now").click()
    await expect(page.locator(".flash.notice")).to_contain_text("Fired now: task tsk_")
    await expect(page.locator("table.list")).to_contain_text("manual")
    await shots.take(page, "schedule")
