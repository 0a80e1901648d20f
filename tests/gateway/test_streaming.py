"""Streaming relay: exact events under torture splits, disconnects, cuts, idle timeouts, failover."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
import pytest

from hearth.testing.fake_upstream import ERROR_EVENT_MESSAGE, FakeBehavior
from hearth.wire.model_name import public_model_body
from hearth.wire.sse import SSEParser
from tests.support import ADMIN, AUTH, chat_body, gateway_registry


def _ep(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", **extra}


def _events(raw: bytes) -> list[bytes]:
    parser = SSEParser()
    return [e.data for e in parser.feed(raw)]


async def _stream_raw(http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    async with http.stream("POST", url, json=body, headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        return b"".join([c async for c in r.aiter_raw()])


@pytest.mark.parametrize("split", ["bytes", "coalesce", "none"])
async def test_relayed_events_are_identical_to_the_upstream_events(split, fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    fake.set_defaults(split=split, chunks=40)
    body = chat_body("torture 你好 🔥", stream=True, stream_options={"include_usage": True})
    fake.reset()
    through = await _stream_raw(http, server.base_url + "/v1/chat/completions", body, AUTH)
    upstream_body = fake.stats.last_body
    fake.reset()
    direct = await _stream_raw(http, fake.base_url + "/chat/completions", upstream_body, {})
    relayed, original = _events(through), _events(direct)
    assert len(original) > 40
    # byte for byte but for `model`, which shows the public name ("m") instead of the upstream's ("up")
    assert relayed == [e if e == b"[DONE]" else public_model_body(e, "m") for e in original]
    text = "".join(orjson.loads(e)["choices"][0]["delta"].get("content", "") for e in relayed[:-2]
                   if orjson.loads(e)["choices"])
    assert "你好" in text and "🔥" in text


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_client_disconnect_closes_upstream_and_frees_leases_within_2s(backend, fake, hearth_server, http,
                                                                           request):
    settings: dict[str, Any] = {}
    if backend == "redis":
        settings = {"state_backend": "redis", "redis_prefix": request.getfixturevalue("redis_prefix")}
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, max_concurrency=4)]), **settings)
    fake.set_defaults(chunks=100, chunk_delay_ms=100)
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        chunks = r.aiter_raw()  # (breaking out of `async for` would already close the connection)
        for _ in range(2):
            await chunks.__anext__()
        status = (await http.get(server.base_url + "/api/v1/admin/endpoints/a/status", headers=ADMIN)).json()
        assert status["data"]["scopes"]["ep:a"]["in_flight"] == 1
        await chunks.aclose()
    closed_at = time.monotonic()
    while time.monotonic() - closed_at < 2.0:
        status = (await http.get(server.base_url + "/api/v1/admin/endpoints/a/status", headers=ADMIN)).json()
        stats = fake.stats
        if status["data"]["scopes"]["ep:a"]["in_flight"] == 0 and stats.disconnects == 1 and stats.in_flight == 0:
            break
        await asyncio.sleep(0.05)
    assert status["data"]["scopes"]["ep:a"]["in_flight"] == 0
    assert fake.stats.disconnects == 1 and fake.stats.in_flight == 0, fake.stats


async def test_upstream_cut_mid_stream_ends_with_an_error_event_not_a_silent_200(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    fake.set_defaults(disconnect_after_chunks=3)
    raw = await _stream_raw(http, server.base_url + "/v1/chat/completions", chat_body(stream=True), AUTH)
    events = _events(raw)
    assert events[-1] != b"[DONE]"
    assert orjson.loads(events[-1])["error"]["code"] == "upstream_stream_interrupted"
    assert fake.stats.requests == 1  # never retried after the first byte


async def test_malformed_event_mid_stream_ends_with_an_error_event(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    fake.set_defaults(malformed=True)
    events = _events(await _stream_raw(http, server.base_url + "/v1/chat/completions", chat_body(stream=True), AUTH))
    assert orjson.loads(events[-1])["error"]["code"] == "upstream_stream_interrupted"


async def test_idle_upstream_stream_is_cut_after_the_idle_timeout(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), stream_idle_timeout_s=0.5)
    fake.set_defaults(chunks=5, chunk_delay_ms=3000)
    started = time.monotonic()
    events = _events(await _stream_raw(http, server.base_url + "/v1/chat/completions", chat_body(stream=True), AUTH))
    assert orjson.loads(events[-1])["error"]["code"] == "upstream_stream_idle"  # its own code, not "interrupted"
    assert time.monotonic() - started < 2.5


async def test_an_upstream_error_event_mid_stream_is_relayed_with_its_cause(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    fake.set_defaults(error_after_chunks=2)
    events = _events(await _stream_raw(http, server.base_url + "/v1/chat/completions", chat_body(stream=True), AUTH))
    contents = [e for e in events[:-1] if b'"choices"' in e]
    assert len(contents) >= 2  # what came before the error reached the client
    error = orjson.loads(events[-1])["error"]
    assert error["code"] == "upstream_stream_error"
    assert ERROR_EVENT_MESSAGE in error["message"] and "overloaded" in error["message"]
    logs: list[Any] = []
    for _ in range(50):  # the request-log writer flushes every 50 ms in tests
        logs = (await http.get(server.base_url + "/api/v1/request-logs", headers=ADMIN)).json()["data"]["items"]
        if logs:
            break
        await asyncio.sleep(0.05)
    assert logs[0]["error_code"] == "upstream_stream_error" and logs[0]["status"] == 502


async def test_stream_fails_over_before_the_first_byte(fake, fake2, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, priority=0),
                                             _ep("b", fake2.base_url, priority=1)]))
    fake.script(FakeBehavior(status=503))
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        assert r.headers["x-hearth-endpoint"] == "b"
        raw = b"".join([c async for c in r.aiter_raw()])
    assert _events(raw)[-1] == b"[DONE]"


async def test_stream_usage_is_recorded_in_the_request_log(fake, hearth_server, http):
    registry = gateway_registry([_ep("a", fake.base_url)],
                                prices=[{"model": "up", "input_per_1m": 1.0, "output_per_1m": 2.0}])
    server = hearth_server(registry)
    fake.set_defaults(chunks=10)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(stream=True), headers=AUTH)
    rid = r.headers["x-request-id"]
    for _ in range(50):
        logs = (await http.get(server.base_url + "/api/v1/request-logs", params={"request_id": rid},
                               headers=ADMIN)).json()["data"]["items"]
        if logs:
            break
        await asyncio.sleep(0.05)
    row = logs[0]
    assert row["stream"] is True and row["status"] == 200
    assert row["completion_tokens"] == 10 and row["usage_estimated"] is False
    assert row["cost"] == pytest.approx((row["prompt_tokens"] * 1.0 + 10 * 2.0) / 1e6)
    assert row["ttft_ms"] is not None and row["endpoint"] == "a"


# ---- timeout classes: time to first event, then idle between events ----------------------------------------

def _stream_ep(kind: str, name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    provider = {"openai": "openai-like", "anthropic": "anthropic-like"}[kind]
    return {**_ep(name, base_url, **extra), "provider": provider}


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_first_event_slower_than_the_idle_timeout_is_waited_for(kind, fake, hearth_server, http):
    """The idle timeout is for silence between events; the first one is bounded by the TTFT timeout only."""
    server = hearth_server(gateway_registry([_stream_ep(kind, "a", fake.base_url)]),
                           stream_idle_timeout_s=0.4)
    fake.set_defaults(chunks=3, first_event_delay_ms=600)  # 1.5 × the idle timeout, well within the TTFT one
    events = _events(await _stream_raw(http, server.base_url + "/v1/chat/completions", chat_body(stream=True), AUTH))
    assert events[-1] == b"[DONE]", events[-1]
    assert fake.stats.requests == 1


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_endpoints_first_token_timeout_bounds_the_first_event_and_fails_over(kind, fake, fake2,
                                                                                      hearth_server, http):
    server = hearth_server(gateway_registry([
        _stream_ep(kind, "a", fake.base_url, priority=0, first_token_timeout_s=0.3),
        _stream_ep(kind, "b", fake2.base_url, priority=1)]))
    fake.set_defaults(first_event_delay_ms=3000)
    started = time.monotonic()
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
        raw = b"".join([c async for c in r.aiter_raw()])
    assert _events(raw)[-1] == b"[DONE]"
    assert time.monotonic() - started < 2.0  # not the endpoint's 60 s timeout_s, nor the fake's 3 s delay
    assert fake.stats.requests == 1 and fake2.stats.requests == 1


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_endpoints_idle_timeout_replaces_the_default_after_the_first_event(kind, fake, hearth_server,
                                                                                    http):
    server = hearth_server(gateway_registry([_stream_ep(kind, "a", fake.base_url, stream_idle_timeout_s=0.3)]),
                           stream_idle_timeout_s=30)
    fake.set_defaults(chunks=5, chunk_delay_ms=3000)
    started = time.monotonic()
    events = _events(await _stream_raw(http, server.base_url + "/v1/chat/completions", chat_body(stream=True), AUTH))
    assert orjson.loads(events[-1])["error"]["code"] == "upstream_stream_idle"
    assert time.monotonic() - started < 2.0
