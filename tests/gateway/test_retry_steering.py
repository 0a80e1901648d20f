"""Steering client retries: ``x-should-retry`` and an honest ``Retry-After`` on every error answer.

Hearth has its own attempt budget; an SDK that retries on top of it multiplies the load on a
failing pool (3 SDK tries × 3 endpoints = 9 upstream calls). So an answer after a failover says
``x-should-retry: false``, as does any error that a retry cannot fix; a retryable error after one
attempt says ``true`` and, where Hearth knows it, when the retry can succeed.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest

from hearth.errors import CATALOG, HearthError
from hearth.gateway.health import HealthBook
from hearth.testing.fake_upstream import FakeBehavior
from tests.support import AUTH, chat_body, gateway_registry


def _ep(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", **extra}


def _three(fake: Any, **extra: Any) -> dict[str, Any]:
    return gateway_registry([_ep(n, fake.base_url, **extra) for n in ("a", "b", "c")])


async def _chat(http: Any, server: Any, **extra: Any) -> Any:
    return await http.post(server.base_url + "/v1/chat/completions", json=chat_body(**extra), headers=AUTH)


async def test_sdk_at_default_retries_reaches_a_failing_pool_at_most_three_times(fake, hearth_server):
    server = hearth_server(_three(fake))
    fake.set_defaults(status=500)
    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="test-key-123")  # max_retries=2
    assert client.max_retries == 2
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as failed:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert fake.stats.requests == 3  # Hearth's own three attempts; the SDK did not multiply them
    assert failed.value.response.headers["x-should-retry"] == "false"
    assert time.monotonic() - started < 1.0  # no SDK backoff sleep either
    await client.close()


async def test_sdk_stream_that_fails_before_its_first_byte_is_not_retried_either(fake, hearth_server, http):
    server = hearth_server(_three(fake))
    fake.set_defaults(status=500)
    r = await _chat(http, server, stream=True)
    assert r.status_code == 502 and r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["code"] == "upstream_error"
    assert r.headers["x-should-retry"] == "false"
    fake.reset()
    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="test-key-123")
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    assert fake.stats.requests == 3
    await client.close()


async def test_one_attempt_at_a_503_with_retry_after_says_retry_then(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    fake.script(FakeBehavior(status=503, retry_after=4))
    r = await _chat(http, server)
    assert r.status_code == 502, r.text
    assert r.headers["x-should-retry"] == "true"
    assert r.headers["retry-after"] == "4"
    assert 3000 <= int(r.headers["retry-after-ms"]) <= 4000


async def test_one_attempt_at_a_500_says_retry(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    fake.script(FakeBehavior(status=500))
    r = await _chat(http, server)
    assert r.status_code == 502 and r.headers["x-should-retry"] == "true"
    assert "retry-after" not in r.headers  # Hearth does not know when: the SDK's own backoff decides


async def test_a_failover_that_ran_out_says_do_not_retry_even_on_429(fake, hearth_server, http):
    server = hearth_server(_three(fake))
    fake.set_defaults(status=429, retry_after=2)
    r = await _chat(http, server)
    assert r.status_code == 429 and fake.stats.requests == 3
    assert r.headers["x-should-retry"] == "false"
    assert r.headers["retry-after"] == "2"  # still told truthfully, for clients that read only that


async def test_errors_a_retry_cannot_fix_say_so(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    bad_key = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                              headers={"Authorization": "Bearer nope"})
    assert bad_key.status_code == 401 and bad_key.headers["x-should-retry"] == "false"
    missing = await _chat(http, server, model="no-such-model")
    assert missing.status_code == 404 and missing.headers["x-should-retry"] == "false"
    invalid = await http.post(server.base_url + "/v1/chat/completions", content=b"{not json", headers=AUTH)
    assert invalid.status_code == 400 and invalid.headers["x-should-retry"] == "false"
    fake.script(FakeBehavior(status=400))  # the upstream's own 400, relayed as is
    relayed = await _chat(http, server)
    assert relayed.status_code == 400 and relayed.headers["x-should-retry"] == "false"
    assert fake.stats.requests == 1


def test_the_catalog_decides_for_errors_without_a_failover():
    for code, spec in CATALOG.items():
        assert HearthError(code).headers()["x-should-retry"] == ("true" if spec.retryable else "false"), code
    for code in ("budget_exhausted", "model_not_allowed", "invalid_request", "model_not_found"):
        assert HearthError(code).headers()["x-should-retry"] == "false"
    err = HearthError("upstream_error")
    err.failed_over = True
    assert err.headers()["x-should-retry"] == "false"


def test_retry_after_is_whole_seconds_rounded_up_and_exact_milliseconds():
    assert HearthError("capacity_exhausted", retry_after=2.5).headers() == {
        "x-should-retry": "true", "Retry-After": "3", "retry-after-ms": "2500"}
    assert HearthError("capacity_exhausted", retry_after=0.01).headers()["Retry-After"] == "1"
    assert HearthError("capacity_exhausted", retry_after=0.01).headers()["retry-after-ms"] == "10"
    assert HearthError("capacity_exhausted", retry_after=3.0).headers()["Retry-After"] == "3"
    assert HearthError("capacity_exhausted", retry_after=3.0001).headers()["Retry-After"] == "4"
    assert "Retry-After" not in HearthError("capacity_exhausted").headers()


async def test_success_answers_carry_no_retry_steering(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    ok = await _chat(http, server)
    assert ok.status_code == 200 and "x-should-retry" not in ok.headers and "retry-after" not in ok.headers
    streamed = await _chat(http, server, stream=True)
    assert streamed.status_code == 200 and "x-should-retry" not in streamed.headers


async def test_capacity_exhausted_by_rpm_says_retry_when_the_window_turns(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, rpm=1)]), admission_wait_s=0)
    assert (await _chat(http, server)).status_code == 200
    r = await _chat(http, server)
    now = time.time()
    assert r.status_code == 429 and r.json()["error"]["code"] == "capacity_exhausted", r.text
    assert r.headers["x-should-retry"] == "true"
    to_next_minute = 60 - now % 60
    assert abs(int(r.headers["retry-after-ms"]) / 1000 - to_next_minute) < 1.0


async def test_a_429_with_retry_after_ms_is_told_exactly(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    fake.script(FakeBehavior(status=429, retry_after=2.5))  # Retry-After: 3, retry-after-ms: 2500
    r = await _chat(http, server)
    assert r.status_code == 429 and r.json()["error"]["code"] == "upstream_rate_limited"
    assert r.headers["x-should-retry"] == "true"
    assert r.headers["retry-after"] == "3"
    assert 2300 <= int(r.headers["retry-after-ms"]) <= 2500
    cooling = await _chat(http, server)  # answered from the cooldown, without calling the upstream
    assert cooling.status_code == 429 and fake.stats.requests == 1
    assert cooling.headers["retry-after"] in ("2", "3")
    assert int(cooling.headers["retry-after-ms"]) <= int(r.headers["retry-after-ms"])


async def test_a_cooldown_shared_through_redis_is_told_from_its_ttl(fake, hearth_server, http, redis_prefix):
    settings = {"state_backend": "redis", "redis_prefix": redis_prefix}
    first = hearth_server(gateway_registry([_ep("a", fake.base_url)]), **settings)
    second = hearth_server(gateway_registry([_ep("a", fake.base_url)]), **settings)
    fake.script(FakeBehavior(status=429, retry_after=5))
    t0 = time.monotonic()
    assert (await _chat(http, first)).status_code == 429
    r = await _chat(http, second)  # this process has not seen the 429: the state backend tells it
    waited_ms = (time.monotonic() - t0) * 1000  # what is left is 5 s less the time since (a loaded machine: > 1 s)
    assert r.status_code == 429 and fake.stats.requests == 1, r.text
    assert r.headers["x-should-retry"] == "true"
    assert 4000 - waited_ms <= int(r.headers["retry-after-ms"]) <= 5000


async def test_an_open_breaker_says_when_its_half_open_probe_is_due(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), breaker_open_s=7, breaker_failures=1)
    fake.set_defaults(status=500)
    first = await _chat(http, server)
    assert first.status_code == 502
    r = await _chat(http, server)
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_healthy_endpoint", r.text
    assert fake.stats.requests == 1
    assert r.headers["x-should-retry"] == "true"
    assert 5 <= int(r.headers["retry-after"]) <= 7
    assert 5000 <= int(r.headers["retry-after-ms"]) <= 7000


async def test_a_model_whose_endpoints_are_all_disabled_says_do_not_retry(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, enabled=False)]))
    r = await _chat(http, server)
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_healthy_endpoint", r.text
    assert r.headers["x-should-retry"] == "false" and "retry-after" not in r.headers
    assert fake.stats.requests == 0


def test_ready_in_is_the_cooldown_or_the_time_to_the_half_open_probe():
    book = HealthBook(failure_threshold=1, open_s=7.0)
    t = 1_000.0
    assert book.ready_in("a", t) == 0.0
    book.failed("a", t)  # opens the circuit until t + 7
    assert book.ready_in("a", t + 2) == 5.0
    book.cool_down("a", t + 10)
    assert book.ready_in("a", t + 2) == 8.0  # the longer of the two
    assert book.ready_in("a", t + 10) == 0.0  # half-open now, no probe yet
    assert book.started("a", t + 10) is True
    assert book.ready_in("a", t + 11) is None  # only the probe in flight can tell
    book.succeeded("a", 5.0)
    assert book.ready_in("a", t + 11) == 0.0
