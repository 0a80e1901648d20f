"""The console's queues, quota groups and prompt pages beyond the basics, over real HTTP (and the prompt stats'
query on SQLite and PostgreSQL): ``GET /api/v1/admin/queues`` and ``/console/queues`` report the same live task
counts; a quota group shows its limits, its live use and its endpoints; a prompt's versions are compared over the
last 24 hours from a bounded read of the request log; a canary share is set and ended with a reason, audited
with the signed-in user."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from hearth.testing.fake_upstream import FakeBehavior
from tests.console.console_client import page_token, sign_in
from tests.support import ADMIN, AUTH, chat_body, gateway_registry, request_log_row
from tests.tasks.api_helpers import TASKS


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    """Two endpoints sharing the limited quota group ``acct``, one in the unlimited ``free``; no worker, so
    submitted tasks stay queued."""
    registry = gateway_registry(
        [{"name": "ep-a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
          "quota_group": "acct"},
         {"name": "ep-b", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
          "quota_group": "acct", "enabled": False},
         {"name": "ep-c", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
          "quota_group": "free", "priority": 1}],  # tried after ep-a: the call below draws on acct
        quota_groups=[{"name": "acct", "rpm": 100, "tpm": 100_000, "max_concurrency": 4, "daily_tokens": 1_000_000},
                      {"name": "free"}])
    return hearth_server(registry, database_url=database_url, task_modules=["hearth.testing.task_types:register"],
                         embedded_worker=False, task_queues={"ai.default": 8, "ai.summary": 2})


@pytest.fixture
async def console(server: Any) -> Any:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        await sign_in(client)
        yield client


async def test_queues_report_live_counts_and_configured_concurrency(server, http, console):
    for _ in range(3):
        r = await http.post(server.base_url + TASKS, headers=AUTH, json={"task_type": "test.noop", "payload": {}})
        assert r.status_code in (200, 201, 202), r.text
    r = await http.get(server.base_url + "/api/v1/admin/queues", headers=ADMIN)
    assert r.status_code == 200, r.text
    queues = {q["queue"]: q for q in r.json()["data"]["queues"]}
    assert set(queues) == {"ai.default", "ai.summary"}
    assert queues["ai.default"] | {"oldest_queued_s": 0} == {"queue": "ai.default", "queued": 3, "waiting": 0,
                                                             "running": 0, "oldest_queued_s": 0, "concurrency": 8}
    assert queues["ai.default"]["oldest_queued_s"] >= 0
    assert queues["ai.summary"]["queued"] == 0 and queues["ai.summary"]["concurrency"] == 2
    assert (await http.get(server.base_url + "/api/v1/admin/queues")).status_code == 401
    page = (await console.get("/console/queues")).text
    row = re.search(r'<tr data-queue="ai.default">.*?</tr>', page, re.S)
    assert row and '<td class="queued">3</td>' in row.group(0) and "<td>8</td>" in row.group(0)


async def test_a_quota_group_shows_its_limits_live_use_and_endpoints(server, http, console):
    minute = int(time.time() // 60)  # RPM and TPM count this wall-clock minute's use
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200, r.text
    await request_log_row(http, server, r.headers["x-request-id"])  # settled: the TPM counter holds real usage
    page = (await console.get("/console/quota-groups")).text
    same_minute = int(time.time() // 60) == minute
    acct = re.search(r'<tr id="qg-acct".*?</tr>', page, re.S)
    assert acct, page
    assert '<td class="concurrency">0 / 4</td>' in acct.group(0)
    rpm = int(re.search(r'<td class="rpm">(\d+) / 100</td>', acct.group(0)).group(1))
    tokens = int(re.search(r'<td class="tpm">(\d+) / 100000</td>', acct.group(0)).group(1))
    daily = int(re.search(r'<td class="daily">(\d+) / 1000000</td>', acct.group(0)).group(1))
    assert daily > 0
    if same_minute:  # else the page was read in a new minute, whose counters rightly start at 0
        assert (rpm, tokens) == (1, daily)
    assert ">ep-a</a>" in acct.group(0) and ">ep-b</a> <small>(disabled)</small>" in acct.group(0)
    free = re.search(r'<tr id="qg-free".*?</tr>', page, re.S)
    assert free and "not counted" in free.group(0) and ">ep-c</a>" in free.group(0)
    endpoints = (await console.get("/console/endpoints")).text
    assert 'href="/console/quota-groups#qg-acct"' in endpoints


async def test_prompt_version_stats_read_the_newest_capability_rows_of_the_window(engine):
    from hearth.observability.request_log import prompt_version_window
    from hearth.store.tables import request_logs

    now = datetime.now(UTC).replace(microsecond=0)
    base = {"request_id": "r", "caller": "c", "model": "m", "stream": False, "attempts": 1, "usage_estimated": False,
            "cost": 0.0, "fallback_used": False, "prompt_code": "greet"}
    rows = [(2, 10, 200, 100.0), (2, 20, 500, 300.0), (2, 30, 200, 200.0), (1, 40, 200, 50.0),
            (1, 50, 200, 70.0), (1, 7200 * 13, 500, 1.0)]  # (version, seconds ago, status, latency); the last is old
    async with engine.begin() as conn:
        await conn.execute(request_logs.insert(), [
            {**base, "route": "capability", "prompt_version": v, "created_at": now - timedelta(seconds=ago),
             "status": status, "latency_ms": latency, "prompt_tokens": 10, "completion_tokens": 5}
            for v, ago, status, latency in rows] + [
            {**base, "route": "chat", "prompt_version": 2, "created_at": now, "status": 500, "latency_ms": 9.0,
             "prompt_tokens": 1, "completion_tokens": 1}])  # a model call of a capability request: not counted
    stats, sampled = await prompt_version_window(engine, "greet", since=now - timedelta(hours=24), limit=100)
    assert not sampled
    assert stats == [
        {"version": 2, "calls": 3, "errors": 1, "error_rate": 0.3333, "latency_ms_p50": 200.0,
         "latency_ms_p95": 300.0, "prompt_tokens": 30, "completion_tokens": 15},
        {"version": 1, "calls": 2, "errors": 0, "error_rate": 0.0, "latency_ms_p50": 50.0, "latency_ms_p95": 70.0,
         "prompt_tokens": 20, "completion_tokens": 10}]
    newest, sampled = await prompt_version_window(engine, "greet", since=now - timedelta(hours=24), limit=2)
    assert sampled and [(s["version"], s["calls"]) for s in newest] == [(2, 2)]  # the two newest calls only


async def test_a_canary_share_is_set_and_ended_with_a_reason(server, http, console):
    for text in ("Say hello to {{ name }}.", "Greet {{ name }} warmly."):
        r = await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
            "code": "greet", "contents": {"en": text}, "variables": [{"name": "name"}]})
        assert r.status_code == 201, r.text
    token = await page_token(console, "/console/prompts/greet")
    url = "/console/prompts/greet/canary"
    r = await console.post(url, data={"csrf": token, "version": "2", "percent": "12.5",
                                      "reason": "try the warmer tone"})
    assert "notice=Version+2+serves+12.5" in r.headers["location"]
    for refused, why in (({"version": "2", "percent": "80", "reason": "r"}, "between+0+and+50"),
                         ({"version": "2", "percent": "nan", "reason": "r"}, "between+0+and+50"),
                         ({"version": "two", "percent": "10", "reason": "r"}, "Choose+a+version"),
                         ({"version": "2", "percent": "10", "reason": ""}, "A+reason+is+required")):
        r = await console.post(url, data={"csrf": token, **refused})
        assert why in r.headers["location"], r.headers["location"]
    r = await console.post(url, data={"csrf": token, "version": "1", "percent": "5", "reason": "r"})
    assert "error=Only+an+inactive+version+can+be+a+canary" in r.headers["location"]
    prompt = (await http.get(server.base_url + "/api/v1/prompts/greet", headers=ADMIN)).json()["data"]
    assert next(v for v in prompt["versions"] if v["version"] == 2)["canary_share"] == 0.125
    event = next(h for h in prompt["history"] if h["action"] == "canary")
    assert event["operator"] == "admin" and event["reason"] == "share=0.125: try the warmer tone"
    page = (await console.get("/console/prompts/greet")).text
    assert "canary 12.5 %" in page and "End canary" in page and 'data-testid="version-stats"' in page
    assert "Version 2 serves 12.5 % of requests." in page
    assert "Changes if activated (against version 1)" in page
    r = await console.post(url, data={"csrf": token, "version": "2", "percent": "0", "reason": "enough data"})
    assert "canary+ended" in r.headers["location"]
    prompt = (await http.get(server.base_url + "/api/v1/prompts/greet", headers=ADMIN)).json()["data"]
    assert next(v for v in prompt["versions"] if v["version"] == 2)["canary_share"] == 0.0


async def test_the_endpoints_page_shows_the_last_hours_calls_p95_and_the_last_upstream_error(fake, server, http,
                                                                                            console):
    ok = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert ok.status_code == 200, ok.text
    await request_log_row(http, server, ok.headers["x-request-id"])  # written: its rollup is in the same batch
    before = (await console.get("/console/endpoints")).text
    row = re.search(r'<tr data-endpoint="ep-a".*?</tr>', before, re.S)
    assert row, before
    assert "1 calls, 0 errors" in row.group(0) and "p95 " in row.group(0)
    assert re.search(r'<td class="last-error"><small>—</small></td>', row.group(0))
    fake.script(FakeBehavior(status=503))  # ep-a's next attempt fails; the call fails over to ep-c
    failed_over = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert failed_over.status_code == 200 and failed_over.headers["x-hearth-endpoint"] == "ep-c"
    after = (await console.get("/console/endpoints")).text
    row = re.search(r'<tr data-endpoint="ep-a".*?</tr>', after, re.S)
    assert row and "503 <code>upstream_error</code>" in row.group(0)
    other = re.search(r'<tr data-endpoint="ep-c".*?</tr>', after, re.S)
    assert other and '<td class="last-error"><small>—</small></td>' in other.group(0)
    assert "no calls" in re.search(r'<tr data-endpoint="ep-b".*?</tr>', after, re.S).group(0)
