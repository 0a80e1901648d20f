"""Capability chat over SSE (seed 001 §7.7): event order and format, heartbeats, busy, resume with
Last-Event-ID, one model call per request id (also across two Hearth servers on one database), and a
client that leaves cancelling the upstream call."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from hearth.testing.fake_upstream import reply_pieces
from hearth.wire.sse import SSEParser
from tests.support import ADMIN, AUTH, REDIS_URL, gateway_registry

USER = {**AUTH, "X-Hearth-User": "alice"}
URL = "/api/v1/ai/chat"


def _registry(fake: Any, **limits: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up"}])
    reg["callers"] = [{"name": "tester", "key": "test-key-123", "limits": limits}]
    return reg


def _body(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}], **extra}


async def _events(http: Any, url: str, body: dict[str, Any], headers: dict[str, str]) -> list[dict[str, Any]]:
    async with http.stream("POST", url, json=body, headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join([c async for c in r.aiter_raw()])
    return [{"id": int(e.id) if e.id else None, "event": e.event, "data": orjson.loads(e.data)}
            for e in SSEParser().feed(raw)]


async def test_events_are_messages_then_done_with_increasing_ids(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=4)
    events = await _events(http, server.base_url + URL, _body(), USER)
    assert [e["event"] for e in events] == ["message"] * 4 + ["done"]
    assert [e["id"] for e in events] == [1, 2, 3, 4, 5]
    assert "".join(e["data"]["answer"] for e in events[:4]) == "".join(reply_pieces(4))
    done = events[-1]["data"]
    assert done["usage"]["completion_tokens"] == 4 and done["prompt_code"] == "chat_assistant"
    assert fake.stats.last_body["stream"] is True


async def test_a_heartbeat_is_sent_after_silence(fake, hearth_server, http):
    server = hearth_server(_registry(fake), sse_heartbeat_s=0.1)
    fake.set_defaults(chunks=2, first_event_delay_ms=450)
    events = await _events(http, server.base_url + URL, _body(), USER)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "heartbeat" and kinds[-1] == "done"
    assert kinds.count("message") == 2
    assert isinstance(events[0]["data"]["timestamp"], int)


async def test_busy_when_the_users_stream_slot_is_taken(fake, hearth_server, http):
    server = hearth_server(_registry(fake, user={"stream_concurrency": 1}), limit_wait_s=0)
    fake.set_defaults(chunks=5, chunk_delay_ms=100)
    holder = asyncio.create_task(_events(http, server.base_url + URL, _body(), USER))
    for _ in range(200):
        if fake.stats.in_flight >= 1:
            break
        await asyncio.sleep(0.01)
    events = await _events(http, server.base_url + URL, _body(), USER)
    assert [e["event"] for e in events] == ["busy"]
    assert events[0]["data"]["code"] == "user_stream_concurrency_exceeded"
    assert events[0]["data"]["retry_after"] > 0
    assert [e["event"] for e in await holder][-1] == "done"
    assert fake.stats.requests == 1


async def test_a_finished_stream_resumes_after_last_event_id_without_calling_the_model(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=4)
    first = await _events(http, server.base_url + URL, _body(request_id="conv-1-msg-1"), USER)
    resumed = await _events(http, server.base_url + URL, _body(request_id="conv-1-msg-1"),
                            {**USER, "Last-Event-ID": "3"})
    assert resumed == [e for e in first if e["id"] > 3]
    again = await _events(http, server.base_url + URL, _body(request_id="conv-1-msg-1"), USER)
    assert again == first
    assert fake.stats.requests == 1


async def test_a_duplicate_request_id_at_a_second_server_never_reaches_the_upstream_twice(
        fake, hearth_server, http, database_url, redis_prefix):
    shared = {"database_url": database_url, "state_backend": "redis", "redis_url": REDIS_URL,
              "redis_prefix": redis_prefix}
    first = hearth_server(_registry(fake), **shared)
    second = hearth_server(_registry(fake), **shared, sse_heartbeat_s=0.1)
    fake.set_defaults(chunks=4, chunk_delay_ms=100)
    body = _body(request_id="dup-1")
    running = asyncio.create_task(_events(http, first.base_url + URL, body, USER))
    for _ in range(200):
        if fake.stats.in_flight >= 1:
            break
        await asyncio.sleep(0.01)
    joined = await _events(http, second.base_url + URL, body, USER)  # waits for the first, then replays it
    original = await running
    assert [e for e in joined if e["event"] != "heartbeat"] == original
    after = await http.post(second.base_url + URL, json={**body, "stream": False}, headers=USER)
    assert after.status_code == 200, after.text
    assert after.json()["data"]["replayed"] is True
    assert after.json()["data"]["message"]["content"] == "".join(reply_pieces(4))
    assert fake.stats.requests == 1


async def test_a_non_stream_duplicate_returns_the_stored_answer(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    body = {**_body(request_id="once"), "stream": False}
    a = await http.post(server.base_url + URL, json=body, headers=USER)
    b = await http.post(server.base_url + URL, json=body, headers=USER)
    assert a.status_code == b.status_code == 200
    assert b.json()["data"]["message"] == a.json()["data"]["message"] and b.json()["data"]["replayed"] is True
    other_user = await http.post(server.base_url + URL, json=body, headers={**AUTH, "X-Hearth-User": "bob"})
    assert other_user.status_code == 200 and "replayed" not in other_user.json()["data"]
    assert fake.stats.requests == 2  # one per (user, request id)


async def test_a_client_that_leaves_cancels_the_upstream_call(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=50, chunk_delay_ms=100)
    async with http.stream("POST", server.base_url + URL, json=_body(), headers=USER) as r:
        async for _ in r.aiter_raw():
            break  # the first bytes arrived: leave
    for _ in range(300):
        if fake.stats.disconnects >= 1 and fake.stats.in_flight == 0:
            break
        await asyncio.sleep(0.01)
    assert fake.stats.disconnects == 1 and fake.stats.in_flight == 0


@pytest.mark.parametrize("value", ["abc", "-1", "1" * 12])
async def test_a_malformed_last_event_id_is_a_400(fake, hearth_server, http, value):
    server = hearth_server(_registry(fake))
    r = await http.post(server.base_url + URL, json=_body(request_id="x"), headers={**USER, "Last-Event-ID": value})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"


async def _capability_rows(http: Any, server: Any, request_id: str) -> list[dict[str, Any]]:
    for _ in range(100):
        r = await http.get(server.base_url + "/api/v1/request-logs", params={"request_id": request_id,
                                                                            "route": "capability"}, headers=ADMIN)
        items = r.json()["data"]["items"]
        if items:
            return list(items)
        await asyncio.sleep(0.05)
    raise AssertionError("no capability row")


async def test_a_streamed_chat_writes_its_capability_row_with_usage_and_outcome(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=4)
    async with http.stream("POST", server.base_url + URL, json=_body(), headers=USER) as r:
        request_id = r.headers["x-request-id"]
        raw = b"".join([c async for c in r.aiter_raw()])
    assert b"event: done" in raw
    [row] = await _capability_rows(http, server, request_id)
    assert (row["status"], row["capability"], row["prompt_code"], row["completion_tokens"]) == (
        200, "chat", "chat_assistant", 4)
    assert row["attempts"] == 1
