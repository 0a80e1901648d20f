"""A client that leaves is noticed at once, before the first upstream byte too (issue 8, item 1).

The clients are raw sockets that send a whole request, wait 0.3 s and close. The upstream would
take 5 s (to answer, or to send a stream's first event); Hearth must close its upstream request
within 1 s of the client leaving, start no failover, free every lease, and log 499
``client_disconnected`` — without any error in the logs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import orjson
import pytest

from hearth.testing.fake_upstream import FakeUpstream
from hearth.wire.tokens import estimate_messages
from tests.support import ADMIN, AUTH, chat_body, ledger_summary

UPSTREAM_DELAY_MS = 5000.0
CLIENT_STAYS_S = 0.3


def _ep(name: str, base_url: str, priority: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", "priority": priority, "max_concurrency": 4, **extra}


def _registry(first: str, second: str) -> dict[str, Any]:
    """Model ``m`` on endpoints ``a`` (tried first) and ``b`` (where a failover would go); embedding model
    ``emb`` on ``ea`` and ``eb``, the same way."""
    emb = {"capabilities": ["embeddings"]}
    return {
        "providers": [{"name": "openai-like", "kind": "openai"}],
        "endpoints": [_ep("a", first, 0), _ep("b", second, 1), _ep("ea", first, 0, **emb),
                      _ep("eb", second, 1, **emb)],
        "models": [{"name": "m", "endpoints": ["a", "b"]},
                   {"name": "emb", "kind": "embedding", "endpoints": ["ea", "eb"]}],
        "callers": [{"name": "tester", "key": "test-key-123"}],
    }


async def _post_and_leave(port: int, path: str, body: dict[str, Any], request_id: str,
                          stay: float = CLIENT_STAYS_S) -> float:
    """Send the whole request, stay ``stay`` seconds, close; returns when it closed (monotonic)."""
    payload = orjson.dumps(body)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Authorization: {AUTH['Authorization']}\r\nX-Request-Id: {request_id}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode() + payload)
    await writer.drain()
    await asyncio.sleep(stay)
    assert not reader.at_eof() and not reader._buffer  # type: ignore[attr-defined]  # nothing answered yet
    writer.close()
    await writer.wait_closed()
    return time.monotonic()


async def _in_flight(http: Any, server: Any, name: str) -> int:
    status = (await http.get(server.base_url + f"/api/v1/admin/endpoints/{name}/status", headers=ADMIN)).json()
    return int(status["data"]["scopes"][f"ep:{name}"]["in_flight"])


async def _log_row(http: Any, server: Any, request_id: str) -> dict[str, Any] | None:
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        items = (await http.get(server.base_url + "/api/v1/request-logs", params={"request_id": request_id},
                                headers=ADMIN)).json()["data"]["items"]
        if items:
            return dict(items[0])
        await asyncio.sleep(0.05)
    return None


async def _assert_noticed_at_once(http: Any, server: Any, fake: FakeUpstream, fake2: FakeUpstream,
                                  request_id: str, left_at: float, endpoints: tuple[str, str] = ("a", "b")) -> None:
    # The upstream request is closed within 1 s of the client leaving ...
    while not (fake.stats.disconnects == 1 and fake.stats.in_flight == 0):
        assert time.monotonic() - left_at < 1.0, f"upstream request still open: {fake.stats}"
        await asyncio.sleep(0.01)
    # ... every lease is free ...
    while await _in_flight(http, server, endpoints[0]):
        assert time.monotonic() - left_at < 1.5, "endpoint slot still held"
        await asyncio.sleep(0.02)
    # ... and no failover started for a client that is gone.
    await asyncio.sleep(0.2)
    assert fake.stats.requests == 1 and fake2.stats.requests == 0, (fake.stats, fake2.stats)
    assert await _in_flight(http, server, endpoints[1]) == 0
    # The request log says why (written by the gateway when its call is cancelled).
    row = await _log_row(http, server, request_id)
    assert row is not None, "no request-log row for the abandoned call"
    assert (row["status"], row["error_code"]) == (499, "client_disconnected"), row


@pytest.mark.parametrize("route", ["chat", "embeddings"])
async def test_non_stream_call_is_cancelled_when_the_client_leaves(route, fake, fake2, hearth_server, http, caplog):
    caplog.set_level(logging.WARNING)
    server = hearth_server(_registry(fake.base_url, fake2.base_url))
    fake.set_defaults(latency_ms=UPSTREAM_DELAY_MS)
    fake2.set_defaults(latency_ms=UPSTREAM_DELAY_MS)
    if route == "chat":
        path, body, endpoints = "/v1/chat/completions", chat_body("slow answer"), ("a", "b")
    else:
        path, body, endpoints = "/v1/embeddings", {"model": "emb", "input": "slow vector"}, ("ea", "eb")
    rid = uuid.uuid4().hex
    left_at = await _post_and_leave(server.port, path, body, rid)
    await _assert_noticed_at_once(http, server, fake, fake2, rid, left_at, endpoints)
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR], caplog.text


async def test_stream_waiting_for_its_first_event_is_cancelled_when_the_client_leaves(fake, fake2, hearth_server,
                                                                                      http, caplog):
    caplog.set_level(logging.WARNING)
    server = hearth_server(_registry(fake.base_url, fake2.base_url))
    fake.set_defaults(first_event_delay_ms=UPSTREAM_DELAY_MS)  # headers at once, the first event in 5 s
    fake2.set_defaults(first_event_delay_ms=UPSTREAM_DELAY_MS)
    rid = uuid.uuid4().hex
    left_at = await _post_and_leave(server.port, "/v1/chat/completions", chat_body("stream", stream=True), rid)
    await _assert_noticed_at_once(http, server, fake, fake2, rid, left_at)
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR], caplog.text


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_leaves_at_once_is_noticed_too(stream, fake, fake2, hearth_server, http, caplog):
    """Gone a few milliseconds after sending: before Hearth started watching it (ClientWatch waits
    WATCH_DELAY_S), perhaps before the upstream request; still noticed within moments, nothing leaks."""
    caplog.set_level(logging.WARNING)
    server = hearth_server(_registry(fake.base_url, fake2.base_url))
    fake.set_defaults(latency_ms=UPSTREAM_DELAY_MS)
    rid = uuid.uuid4().hex
    left_at = await _post_and_leave(server.port, "/v1/chat/completions", chat_body("bye", stream=stream), rid,
                                    stay=0.002)
    while fake.stats.in_flight or await _in_flight(http, server, "a"):
        assert time.monotonic() - left_at < 1.0, fake.stats
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    stats = fake.stats
    assert stats.requests <= 1 and stats.disconnects == stats.requests and fake2.stats.requests == 0
    if stats.requests:  # the call had reached the gateway's attempts: it is logged as the client's doing
        row = await _log_row(http, server, rid)
        assert row is not None and (row["status"], row["error_code"]) == (499, "client_disconnected"), row
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR], caplog.text


async def test_a_client_that_stays_still_gets_its_answer(fake, hearth_server, http):
    """Watching costs the caller nothing: answers, streams and error answers are unchanged."""
    server = hearth_server(_registry(fake.base_url, fake.base_url))
    fake.set_defaults(latency_ms=300)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200 and r.json()["object"] == "chat.completion"
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as s:
        raw = b"".join([c async for c in s.aiter_raw()])
    assert raw.endswith(b"data: [DONE]\n\n")
    r = await http.post(server.base_url + "/v1/chat/completions", content=b"{not json", headers=AUTH)
    assert r.status_code == 400
    # Keep-alive: several calls on one connection, each watched on its own.
    for _ in range(3):
        r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
        assert r.status_code == 200
    assert await _in_flight(http, server, "a") == 0


async def test_a_non_stream_call_the_client_left_is_charged_as_answered(fake, fake2, hearth_server, http):
    # the client left while the upstream had the request: the provider may finish (and bill) it anyway
    reg = _registry(fake.base_url, fake2.base_url)
    reg["budgets"] = [{"name": "daily", "caller": "tester", "scope": "caller", "period": "day", "unit": "tokens",
                       "limit": 1_000_000}]
    server = hearth_server(reg)
    fake.set_defaults(latency_ms=UPSTREAM_DELAY_MS)
    body = chat_body("slow answer", max_tokens=40)
    rid = uuid.uuid4().hex
    left_at = await _post_and_leave(server.port, "/v1/chat/completions", body, rid)
    await _assert_noticed_at_once(http, server, fake, fake2, rid, left_at)
    row = await _log_row(http, server, rid)
    assert row is not None and row["usage_estimated"] is True
    assert (row["prompt_tokens"], row["completion_tokens"]) == (estimate_messages(body["messages"]), 40)
    await asyncio.to_thread(server.call, server.runtime.ledger.flush())
    summary = await ledger_summary(server.settings.database_url)
    assert summary["charged"] == estimate_messages(body["messages"]) + 40
