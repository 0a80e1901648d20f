"""SSE keep-alive comments while a stream waits for its first event (HEARTH_SSE_KEEPALIVE_S).

Within the first keep-alive interval nothing is sent: a failure there is a JSON error with its status,
as for a non-stream call. Past it the stream starts (200, headers) and a ``: keep-alive`` comment goes
out every interval; failover still runs behind them, and a failure from then on is an SSE error event.
The interval is 50 ms here, so each test waits well under a second.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
import pytest

from hearth.testing.fake_upstream import FakeBehavior
from hearth.wire.sse import SSEParser
from tests.support import ADMIN, AUTH, chat_body, gateway_registry, request_log_row

KEEPALIVE_S = 0.05
COMMENT = b": keep-alive\n\n"


def _ep(name: str, base_url: str, priority: int = 0) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", "priority": priority}


async def _stream(http: httpx.AsyncClient, server: Any, body: dict[str, Any] | None = None
                  ) -> tuple[httpx.Response, bytes]:
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=body or chat_body(stream=True),
                           headers=AUTH) as r:
        raw = b"".join([c async for c in r.aiter_raw()])
    return r, raw


def _events(raw: bytes) -> list[bytes]:
    return [e.data for e in SSEParser().feed(raw)]



async def test_keep_alive_comments_are_sent_while_the_first_event_is_awaited(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), sse_keepalive_s=KEEPALIVE_S)
    fake.set_defaults(chunks=3, first_event_delay_ms=400)
    started = time.monotonic()
    r, raw = await _stream(http, server)
    assert time.monotonic() - started < 1.0
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    head, _, rest = raw.partition(b"data: ")
    assert head == COMMENT * (head.count(COMMENT)) and 4 <= head.count(COMMENT) <= 9  # ~400 ms / 50 ms
    assert COMMENT not in rest  # only while waiting for the first event
    events = _events(raw)  # comments are not events
    assert events[-1] == b"[DONE]" and len(events) == 3 + 3


async def test_a_quick_first_event_gets_no_keep_alive(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), sse_keepalive_s=KEEPALIVE_S)
    fake.set_defaults(chunks=3)
    r, raw = await _stream(http, server)
    assert r.headers["x-hearth-endpoint"] == "a" and raw.startswith(b"data: ") and COMMENT not in raw


async def test_zero_disables_keep_alives(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), sse_keepalive_s=0)
    fake.set_defaults(chunks=3, first_event_delay_ms=300)
    r, raw = await _stream(http, server)
    assert r.status_code == 200 and raw.startswith(b"data: ") and COMMENT not in raw


async def test_a_failure_within_the_first_interval_is_still_a_json_error(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), sse_keepalive_s=1.0)
    fake.script(FakeBehavior(status=503))
    r, raw = await _stream(http, server)
    assert r.status_code == 502 and r.headers["content-type"] == "application/json"
    assert orjson.loads(raw)["error"]["code"] == "upstream_error" and "x-should-retry" in r.headers


async def test_a_failure_after_keep_alives_began_is_an_error_event(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), sse_keepalive_s=KEEPALIVE_S)
    fake.script(FakeBehavior(status=503, latency_ms=300))
    r, raw = await _stream(http, server)
    assert r.status_code == 200 and raw.startswith(COMMENT)
    events = _events(raw)
    assert len(events) == 1, events  # the error, no [DONE]
    error = orjson.loads(events[0])["error"]
    assert error["code"] == "upstream_error" and error["type"] == "api_error" and "503" in error["message"]
    row = await request_log_row(http, server, r.headers["x-request-id"])
    assert (row["status"], row["error_code"]) == (502, "upstream_error")


async def test_failover_still_runs_behind_the_keep_alives(fake, fake2, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, 0), _ep("b", fake2.base_url, 1)]),
                           sse_keepalive_s=KEEPALIVE_S)
    fake.script(FakeBehavior(status=500, latency_ms=200))
    fake2.set_defaults(chunks=2, first_event_delay_ms=100)
    r, raw = await _stream(http, server)
    assert raw.startswith(COMMENT) and _events(raw)[-1] == b"[DONE]"
    assert "x-hearth-endpoint" not in r.headers  # not known yet when the stream started
    row = await request_log_row(http, server, r.headers["x-request-id"])
    assert (row["status"], row["endpoint"], row["attempts"]) == (200, "b", 2)
    assert (fake.stats.requests, fake2.stats.requests) == (1, 1)


async def test_a_client_leaving_during_keep_alives_closes_the_upstream_and_is_logged(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), sse_keepalive_s=KEEPALIVE_S)
    fake.set_defaults(first_event_delay_ms=5000)
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        chunks = r.aiter_raw()
        assert await chunks.__anext__() == COMMENT
        rid = r.headers["x-request-id"]
        await chunks.aclose()
    for _ in range(50):  # within 1 s of the client leaving
        if fake.stats.disconnects:
            break
        await asyncio.sleep(0.02)
    assert fake.stats.disconnects == 1 and fake.stats.requests == 1
    row = await request_log_row(http, server, rid)
    assert (row["status"], row["error_code"]) == (499, "client_disconnected")
    status = (await http.get(server.base_url + "/api/v1/admin/endpoints/a/status", headers=ADMIN)).json()
    assert status["data"]["scopes"]["ep:a"]["in_flight"] == 0


async def test_the_official_sdk_reads_a_stream_that_began_with_keep_alives(fake, hearth_server):
    openai = pytest.importorskip("openai")
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), sse_keepalive_s=KEEPALIVE_S)
    fake.set_defaults(chunks=3, first_event_delay_ms=200)
    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="test-key-123", max_retries=0)
    try:
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                      stream=True)
        chunks = [c async for c in stream]
    finally:
        await client.close()
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
