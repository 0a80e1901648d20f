"""Admission under real parallel load: concurrency, quota groups, RPM, weights, fail-closed state."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from datetime import time as dtime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from hearth.testing.fake_clock import RunningClock
from tests.support import ADMIN, AUTH, chat_body, gateway_registry, post_many


def _ep(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", **extra}


async def _burst(http: Any, url: str, n: int, **extra: Any) -> list[Any]:
    return await post_many([url + "/v1/chat/completions"], n, chat_body(**extra), AUTH)


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_endpoint_concurrency_limit_holds_under_200_parallel_requests(backend, database_url, fake,
                                                                           hearth_server, http, request):
    settings: dict[str, Any] = {"database_url": database_url}
    if backend == "redis":
        settings |= {"state_backend": "redis", "redis_prefix": request.getfixturevalue("redis_prefix")}
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, max_concurrency=5)]), **settings)
    fake.set_defaults(latency_ms=20)
    results = await _burst(http, server.base_url, 200)
    assert [r.status_code for r in results].count(200) == 200
    stats = fake.stats
    assert stats.requests == 200
    assert stats.max_in_flight == 5  # saturated, never exceeded


async def test_quota_group_limit_is_shared_by_its_endpoints(fake, hearth_server, http):
    registry = gateway_registry(
        [_ep("a", fake.base_url, max_concurrency=10, quota_group="acct"),
         _ep("b", fake.base_url, max_concurrency=10, quota_group="acct")],
        quota_groups=[{"name": "acct", "max_concurrency": 3}])
    server = hearth_server(registry)
    fake.set_defaults(latency_ms=20)
    results = await _burst(http, server.base_url, 60)
    assert all(r.status_code == 200 for r in results)
    assert fake.stats.max_in_flight == 3


async def test_full_endpoint_makes_callers_wait_then_429_with_retry_after(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, max_concurrency=1)]), admission_wait_s=0.2)
    fake.set_defaults(latency_ms=1000)
    results = await _burst(http, server.base_url, 3)
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 429, 429]
    rejected = next(r for r in results if r.status_code == 429)
    assert rejected.json()["error"]["code"] == "capacity_exhausted"
    assert int(rejected.headers["retry-after"]) >= 1
    assert fake.stats.requests == 1


async def test_rpm_limit_refuses_the_request_over_the_window(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, rpm=5)]), admission_wait_s=0)
    server.runtime.state.clock = RunningClock.at_minute_start()  # no count straddles a minute's end
    results = [await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
               for _ in range(6)]
    assert [r.status_code for r in results] == [200] * 5 + [429]
    assert results[-1].json()["error"]["code"] == "capacity_exhausted"
    assert 1 <= int(results[-1].headers["retry-after"]) <= 60  # until the next minute window
    assert fake.stats.requests == 5


async def test_full_endpoint_spills_over_to_the_next_one(fake, fake2, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, max_concurrency=2, priority=0),
                                             _ep("b", fake2.base_url, max_concurrency=50, priority=1)]))
    fake.set_defaults(latency_ms=100)
    fake2.set_defaults(latency_ms=100)
    results = await _burst(http, server.base_url, 20)
    assert all(r.status_code == 200 for r in results)
    assert fake.stats.max_in_flight <= 2
    assert fake2.stats.requests >= 18


async def test_weights_reach_the_upstreams_end_to_end(fake, fake2, hearth_server, http):
    """The proportion itself is checked exactly, with a seeded RNG, in tests/gateway/test_router.py; through
    real servers the latency and load factors move it (2.17 was seen for 3:1 on a loaded machine), so this
    only checks that the configured weights reach the routing at all (ignored weights give about 1:1)."""
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, weight=3), _ep("b", fake2.base_url, weight=1)]))
    fake.set_defaults(latency_ms=20)
    fake2.set_defaults(latency_ms=20)
    for _ in range(50):
        await _burst(http, server.base_url, 8)
    a, b = fake.stats.requests, fake2.stats.requests
    assert a + b == 400
    assert 1.6 < a / b < 6, (a, b)


async def test_unreachable_redis_fails_closed_with_503(fake, hearth_server, http, redis_prefix):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), state_backend="redis",
                           redis_url="redis://127.0.0.1:1/0", redis_prefix=redis_prefix)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "state_backend_unavailable"
    assert r.headers["retry-after"]
    assert fake.stats.requests == 0
    ready = await http.get(server.base_url + "/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["state_backend"].startswith("error")


def _seconds_to_midnight(zone: str) -> float:
    now = time.time()
    local = datetime.fromtimestamp(now, ZoneInfo(zone))
    return datetime.combine(local.date() + timedelta(days=1), dtime(0), ZoneInfo(zone)).timestamp() - now


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_quota_group_daily_tokens_settle_actual_usage_and_refuse_until_midnight_in_the_zone(
        backend, fake, hearth_server, http, request):
    settings: dict[str, Any] = {"admission_wait_s": 5, "quota_time_zone": "Asia/Kolkata"}
    if backend == "redis":
        settings |= {"state_backend": "redis", "redis_prefix": request.getfixturevalue("redis_prefix")}
    registry = gateway_registry([_ep("a", fake.base_url, quota_group="acct")],
                                quota_groups=[{"name": "acct", "daily_tokens": 300}])
    server = hearth_server(registry, **settings)
    # each call is admitted on its estimate (prompt + max_tokens 100, ~110) and settled with the ~10 tokens
    # the upstream reports: five of them fit in 300 only because the estimates are corrected
    used = 0
    for _ in range(5):
        r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=100), headers=AUTH)
        assert r.status_code == 200, r.text
        used += r.json()["usage"]["total_tokens"]
    started = time.monotonic()
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=400), headers=AUTH)
    assert r.status_code == 429, r.text
    assert time.monotonic() - started < 1  # waiting cannot help before midnight: refused at once
    error = r.json()["error"]
    assert error["code"] == "capacity_exhausted" and "daily_tokens" in r.text
    # Retry-After: the truth, the next midnight in Asia/Kolkata (UTC+5:30), not the minute window
    assert abs(int(r.headers["retry-after"]) - _seconds_to_midnight("Asia/Kolkata")) <= 2
    assert r.headers["x-should-retry"] == "true"
    assert fake.stats.requests == 5
    status = (await http.get(server.base_url + "/api/v1/admin/endpoints/a/status", headers=ADMIN)).json()["data"]
    group = status["scopes"]["qg:acct"]
    assert group["daily_tokens"] == 300 and group["daily_tokens_used"] == used < 300  # the actual usage, settled
