"""Endpoint test calls over real HTTP against the fake upstream: the admin API and the console's form call the
same service — one tiny chat request through the gateway core, no caller budget, logged as an operator test —
an upstream error is reported (and judged like any call's), and a second test within a minute is refused with
when the next one is allowed (an injected clock moves the minute on; on Redis the limit holds across two
servers; with the state backend down a test is refused, never sent unlimited)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hearth.console.passwords import hash_password
from hearth.testing.fake_clock import FakeClock
from hearth.testing.fake_upstream import FakeBehavior
from tests.console.console_client import page_token, registry, sign_in
from tests.support import ADMIN, request_log_row

TEST = "/api/v1/admin/endpoints/ep-a/test"
VIEWER = {"name": "vera", "role": "viewer", "password_hash": hash_password("viewer-password-1")}


def _budgeted(fake: Any) -> dict[str, Any]:
    """``registry`` with a tight money budget on the caller (a test call must not touch it), a price, and an
    embeddings-only endpoint (a test call is a chat request: it cannot test that one)."""
    base = registry(fake)
    return {**base, "prices": [{"model": "up", "input_per_1m": 1000.0, "output_per_1m": 1000.0}],
            "budgets": [{"name": "tight", "caller": "tester", "scope": "caller", "period": "day", "unit": "money",
                         "limit": 1.0}],
            "endpoints": [*base["endpoints"], {"name": "ep-emb", "provider": "openai-like", "base_url": fake.base_url,
                                               "upstream_model": "emb", "capabilities": ["embeddings"]}],
            "models": [*base["models"], {"name": "e", "kind": "embedding", "endpoints": ["ep-emb"]}]}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str, clock: FakeClock) -> Any:
    started = hearth_server(_budgeted(fake), database_url=database_url, console_users=[VIEWER])
    started.runtime.state.clock = clock  # the once-a-minute claim expires on this clock
    started.runtime.gateway.health.clock = clock
    return started


async def test_a_test_call_reaches_the_endpoint_once_and_is_logged_as_an_operator_test(fake, server, http):
    r = await http.post(server.base_url + TEST, headers=ADMIN)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["ok"] and data["status"] == 200 and data["reached_upstream"] and data["error_code"] is None
    assert data["endpoint"] == "ep-a" and data["operator"] == "admin" and data["latency_ms"] > 0
    assert fake.stats.requests == 1
    assert fake.stats.last_body["max_tokens"] == 5 and fake.stats.last_body["model"] == "up"
    row = await request_log_row(http, server, data["request_id"])
    assert row["route"] == "endpoint_test" and row["end_user"] == "admin" and row["caller"] is None
    assert row["endpoint"] == "ep-a" and row["model"] == "m" and row["status"] == 200
    budgets = (await http.get(server.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
    assert len(budgets) == 1 and budgets[0]["used"] == 0, budgets  # no caller: no budget charged


async def test_an_upstream_error_is_reported_with_its_status_and_counts_as_a_failure(fake, server, http):
    fake.script(FakeBehavior(status=500))
    r = await http.post(server.base_url + TEST, headers=ADMIN)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert not data["ok"] and data["status"] == 500 and data["error_code"] == "upstream_error"
    assert data["reached_upstream"] and fake.stats.requests == 1  # one attempt: a test never fails over
    health = server.runtime.gateway.health.snapshot("ep-a", server.runtime.gateway.health.clock.now())
    assert health["consecutive_failures"] == 1  # judged like any call's failure


async def test_a_second_test_within_a_minute_is_refused_with_when_the_next_is_allowed(fake, server, http, clock):
    assert (await http.post(server.base_url + TEST, headers=ADMIN)).status_code == 200
    clock.advance(20)
    r = await http.post(server.base_url + TEST, headers=ADMIN)
    assert r.status_code == 429 and r.headers["retry-after"] == "40"
    error = r.json()["error"]
    assert error["code"] == "endpoint_test_too_soon" and "next test allowed in 40 s" in error["message"]
    assert fake.stats.requests == 1  # nothing was sent
    clock.advance(40.5)
    assert (await http.post(server.base_url + TEST, headers=ADMIN)).status_code == 200
    assert fake.stats.requests == 2
    unknown = await http.post(server.base_url + "/api/v1/admin/endpoints/nope/test", headers=ADMIN)
    assert unknown.status_code == 404
    embeddings = await http.post(server.base_url + "/api/v1/admin/endpoints/ep-emb/test", headers=ADMIN)
    assert embeddings.status_code == 400 and "does not serve chat" in embeddings.json()["error"]["message"]
    assert (await http.post(server.base_url + TEST)).status_code == 401  # admin token required


async def test_the_console_form_tests_an_endpoint_and_shows_the_outcome(fake, server, clock):
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        await sign_in(client)
        token = await page_token(client, "/console/endpoints")
        r = await client.post("/console/endpoints/ep-a/test", data={"csrf": token})
        assert r.status_code == 303 and "notice=ep-a+answered+200" in r.headers["location"]
        shown = (await client.get("/console/endpoints")).text
        assert "by admin" in shown and 'class="last-test"' in shown
        assert 'action="/console/endpoints/ep-emb/test"' not in shown  # not a chat endpoint: no test button
        r = await client.post("/console/endpoints/ep-a/test", data={"csrf": token})
        assert "next+test+allowed+in+60+s" in r.headers["location"]
        assert fake.stats.requests == 1
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as viewer:
        await sign_in(viewer, "vera", "viewer-password-1")
        token = await page_token(viewer, "/console/endpoints")
        assert ">Test</button>" not in (await viewer.get("/console/endpoints")).text
        refused = await viewer.post("/console/endpoints/ep-a/test", data={"csrf": token})
        assert refused.status_code == 403 and fake.stats.requests == 1


async def test_on_redis_the_limit_holds_across_two_servers(fake, hearth_server, http, redis_prefix):
    shared = {"state_backend": "redis", "redis_prefix": redis_prefix}
    a, b = hearth_server(registry(fake), **shared), hearth_server(registry(fake), **shared)
    assert (await http.post(a.base_url + TEST, headers=ADMIN)).status_code == 200
    r = await http.post(b.base_url + TEST, headers=ADMIN)
    assert r.status_code == 429 and 55 <= int(r.headers["retry-after"]) <= 60
    assert fake.stats.requests == 1


async def test_with_the_state_backend_down_a_test_is_refused_and_nothing_is_sent(fake, hearth_server, http,
                                                                                 redis_prefix):
    server = hearth_server(registry(fake), state_backend="redis", redis_url="redis://127.0.0.1:1/0",
                           redis_prefix=redis_prefix)
    r = await http.post(server.base_url + TEST, headers=ADMIN)
    assert r.status_code == 503 and r.json()["error"]["code"] == "state_backend_unavailable"
    assert r.headers["retry-after"] and fake.stats.requests == 0  # fails closed: the once-a-minute limit holds
