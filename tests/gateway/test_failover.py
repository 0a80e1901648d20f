"""Health and failover: 429 cooldown, 401 disable, circuit breaker, deadlines, no retry on 400."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from hearth.testing.fake_clock import FakeClock
from hearth.testing.fake_upstream import FakeBehavior
from tests.support import ADMIN, AUTH, chat_body, gateway_registry


def _ep(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", **extra}


def _pool(fa: Any, fb: Any, **extra: Any) -> dict[str, Any]:
    # `a` has the better priority, so it is always tried first while healthy.
    return gateway_registry([_ep("a", fa.base_url, priority=0, **extra), _ep("b", fb.base_url, priority=1, **extra)])


async def _chat(http: Any, server: Any, **extra: Any) -> Any:
    return await http.post(server.base_url + "/v1/chat/completions", json=chat_body(**extra), headers=AUTH)


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_429_fails_over_and_cools_the_endpoint_down_for_retry_after(backend, fake, fake2, hearth_server, http,
                                                                         request):
    settings: dict[str, Any] = {}
    if backend == "redis":
        settings = {"state_backend": "redis", "redis_prefix": request.getfixturevalue("redis_prefix")}
    server = hearth_server(_pool(fake, fake2), **settings)
    fake.script(FakeBehavior(status=429, retry_after=0.8))  # `retry-after-ms: 800` (and `Retry-After: 1`)
    sent = time.monotonic()
    r = await _chat(http, server)
    answered = time.monotonic()
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
    assert r.headers["x-hearth-attempts"] == "2"
    # The cooldown began when the 429 arrived, between `sent` and `answered`: it surely lasts until
    # sent + 0.8 and is surely over at answered + 0.8, however slow the machine.
    during = 0
    while during < 5 and time.monotonic() < sent + 0.6:  # during the cooldown nothing reaches `a`
        assert (await _chat(http, server)).headers["x-hearth-endpoint"] == "b"
        during += 1
    assert during >= 1 and fake.stats.requests == 1
    await asyncio.sleep(max(0.0, answered + 0.8 - time.monotonic()) + 0.1)
    assert (await _chat(http, server)).headers["x-hearth-endpoint"] == "a"
    assert fake.stats.requests == 2


async def test_429_everywhere_returns_429_with_retry_after(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    fake.set_defaults(status=429, retry_after=7)
    r = await _chat(http, server)
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "upstream_rate_limited"
    assert int(r.headers["retry-after"]) >= 1
    r2 = await _chat(http, server)  # now cooling: answered without calling the upstream
    assert r2.status_code == 429 and fake.stats.requests == 1, r2.text


async def test_401_disables_the_endpoint_and_logs_an_alert(fake, fake2, hearth_server, http):
    server = hearth_server(_pool(fake, fake2))
    fake.set_defaults(status=401)
    r = await _chat(http, server)
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
    for _ in range(3):
        await _chat(http, server)
    assert fake.stats.requests == 1
    eps = (await http.get(server.base_url + "/api/v1/admin/endpoints", headers=ADMIN)).json()["data"]
    a = next(e for e in eps if e["name"] == "a")
    assert a["enabled"] is False and "401" in a["disabled_reason"]
    # re-enabling by an operator puts it back in rotation
    fake.set_defaults(status=200)
    assert (await http.post(server.base_url + "/api/v1/admin/endpoints/a/enable", headers=ADMIN)).status_code == 200
    assert (await _chat(http, server)).headers["x-hearth-endpoint"] == "a"


def _on_fake_clock(server: Any) -> FakeClock:
    """The server's breakers read a fake clock from now on: an open circuit ends when the test says."""
    clock = FakeClock()
    server.runtime.gateway.health.clock = clock
    return clock


async def test_three_5xx_open_the_circuit_then_one_half_open_probe(fake, fake2, hearth_server, http):
    server = hearth_server(_pool(fake, fake2), breaker_open_s=30.0)
    clock = _on_fake_clock(server)
    fake.set_defaults(status=500)
    for _ in range(3):
        r = await _chat(http, server)
        assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
    assert fake.stats.requests == 3
    for _ in range(5):  # open: `a` is skipped entirely
        await _chat(http, server)
    clock.advance(29.9)
    await _chat(http, server)  # still open a moment before open_s
    assert fake.stats.requests == 3
    clock.advance(0.1)
    fake.set_defaults(status=200, latency_ms=300)
    # half-open: of several parallel calls exactly one probes `a`, the others go to `b`
    results = await asyncio.gather(*[_chat(http, server) for _ in range(6)])
    assert sorted(r.headers["x-hearth-endpoint"] for r in results).count("a") == 1
    assert fake.stats.requests == 4
    # the probe succeeded: the circuit is closed and `a` takes traffic again
    assert (await _chat(http, server)).headers["x-hearth-endpoint"] == "a"


async def test_failed_half_open_probe_reopens_the_circuit(fake, fake2, hearth_server, http):
    server = hearth_server(_pool(fake, fake2), breaker_open_s=30.0)
    clock = _on_fake_clock(server)
    fake.set_defaults(status=503)
    for _ in range(3):
        await _chat(http, server)
    clock.advance(30.0)
    await _chat(http, server)  # the probe, fails
    assert fake.stats.requests == 4
    await _chat(http, server)
    assert fake.stats.requests == 4
    clock.advance(29.9)  # reopened for a whole open_s from the failed probe
    await _chat(http, server)
    assert fake.stats.requests == 4
    clock.advance(0.1)
    await _chat(http, server)  # the next probe
    assert fake.stats.requests == 5


async def test_hanging_endpoint_fails_over_within_the_deadline(fake, fake2, hearth_server, http):
    server = hearth_server(_pool(fake, fake2, timeout_s=0.3), request_timeout_s=5)
    fake.set_defaults(hang=True)
    r = await _chat(http, server)
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
    assert r.headers["x-hearth-attempts"] == "2"


async def test_all_endpoints_hanging_ends_at_the_absolute_deadline(fake, fake2, hearth_server, http):
    server = hearth_server(_pool(fake, fake2, timeout_s=30), request_timeout_s=0.8)
    fake.set_defaults(hang=True)
    fake2.set_defaults(hang=True)
    started = time.monotonic()
    r = await _chat(http, server)
    elapsed = time.monotonic() - started
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout"
    # one shared deadline, not a fresh 30 s per endpoint
    assert elapsed < 5
    assert fake.stats.requests + fake2.stats.requests == 1


async def test_400_is_returned_as_is_and_never_retried(fake, fake2, hearth_server, http):
    server = hearth_server(_pool(fake, fake2))
    fake.set_defaults(status=400)
    r = await _chat(http, server)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert fake.stats.requests == 1 and fake2.stats.requests == 0


async def test_at_most_three_attempts_per_call(fake, fake2, hearth_server, http):
    from hearth.testing.fake_upstream import FakeUpstream

    extra = [FakeUpstream() for _ in range(2)]
    for f in extra:
        f.start_in_thread()
    try:
        fakes = [fake, fake2, *extra]
        for f in fakes:
            f.set_defaults(status=502)
        server = hearth_server(gateway_registry([_ep(f"e{i}", f.base_url) for i, f in enumerate(fakes)]))
        r = await _chat(http, server)
        assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"
        assert sum(f.stats.requests for f in fakes) == 3
    finally:
        for f in extra:
            f.stop_thread()


async def test_malformed_upstream_body_counts_as_failure_and_fails_over(fake, fake2, hearth_server, http):
    server = hearth_server(_pool(fake, fake2))
    fake.script(FakeBehavior(malformed=True))
    r = await _chat(http, server)
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
