"""Behaviour of the fake provider server, exercised over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import httpx
import openai
import orjson
import pytest

from hearth.testing.fake_upstream import (
    CREATED,
    DEFAULT_EMBEDDING_DIMS,
    MODELS,
    FakeBehavior,
    FakeUpstream,
    fake_embedding,
    prompt_tokens_for,
    reply_pieces,
    reply_text,
)
from hearth.wire.sse import SSEEvent, SSEParser

USER = [{"role": "user", "content": "hello there"}]  # 11 chars -> 11 // 4 + 1 = 3 prompt tokens


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as up:
        yield up


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def _post(
    session: aiohttp.ClientSession, up: FakeUpstream, path: str, body: dict[str, Any]
) -> aiohttp.ClientResponse:
    return await session.post(up.base_url + path, json=body)


async def _events(resp: aiohttp.ClientResponse) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    async for chunk in resp.content.iter_any():
        events.extend(parser.feed(chunk))
    return events


async def _http_chunks(resp: aiohttp.ClientResponse) -> list[bytes]:
    """The body as the server wrote it: one item per HTTP chunk (= per server write)."""
    chunks: list[bytes] = []
    buf = b""
    async for data, end_of_chunk in resp.content.iter_chunks():
        buf += data
        if end_of_chunk:
            chunks.append(buf)
            buf = b""
    return chunks


async def _eventually(check: Callable[[], bool]) -> None:
    """Poll a server counter that settles shortly after the client side finishes."""
    for _ in range(300):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached within 3 s")


def _content(events: list[SSEEvent]) -> str:
    out = []
    for e in events:
        if e.data == b"[DONE]":
            continue
        for choice in orjson.loads(e.data)["choices"]:
            out.append(choice["delta"].get("content") or "")
    return "".join(out)


async def test_chat_completion_is_openai_shaped_with_formula_usage(
    upstream: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "héllo 你好"}]},
    ]
    resp = await _post(session, upstream, "/chat/completions", {"model": "gpt-x", "messages": messages})
    assert resp.status == 200
    assert resp.content_type == "application/json"
    body = await resp.json()
    prompt = (len("You are terse.") + len("héllo 你好")) // 4 + 1
    assert prompt == prompt_tokens_for(messages) == 6
    assert body == {
        "id": "chatcmpl-fake-1",
        "object": "chat.completion",
        "created": CREATED,
        "model": "gpt-x",
        "system_fingerprint": "fp_hearth_fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply_text(20), "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 6, "completion_tokens": 20, "total_tokens": 26},
    }
    assert "—" in reply_text(20) and "你好" in reply_text(20)


async def test_chat_stream_is_chunk_events_ending_in_done(
    upstream: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    resp = await _post(session, upstream, "/chat/completions", {"model": "m", "messages": USER, "stream": True})
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    events = await _events(resp)
    assert events[-1] == SSEEvent(b"[DONE]")
    chunks = [orjson.loads(e.data) for e in events[:-1]]
    assert len(chunks) == 1 + 20 + 1
    assert {c["id"] for c in chunks} == {"chatcmpl-fake-1"}
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m" for c in chunks)
    assert all("usage" not in c for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]] == reply_pieces(20)
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert _content(events) == reply_text(20)


async def test_include_usage_adds_final_usage_chunk_unless_disabled(
    upstream: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    body = {"messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    events = await _events(await _post(session, upstream, "/chat/completions", body))
    assert events[-1].data == b"[DONE]"
    usage_chunk = orjson.loads(events[-2].data)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 3, "completion_tokens": 20, "total_tokens": 23}
    assert all(orjson.loads(e.data)["usage"] is None for e in events[:-2])

    upstream.set_defaults(usage_in_stream=False)
    events = await _events(await _post(session, upstream, "/chat/completions", body))
    assert events[-1].data == b"[DONE]"
    assert all(orjson.loads(e.data)["choices"] for e in events[:-1])


async def test_max_tokens_caps_the_reply_with_length_finish(
    upstream: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    body = {"messages": USER, "max_tokens": 4}
    reply = await (await _post(session, upstream, "/chat/completions", body)).json()
    assert reply["choices"][0]["message"]["content"] == reply_text(4)
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 4
    events = await _events(await _post(session, upstream, "/chat/completions", {**body, "stream": True}))
    assert _content(events) == reply_text(4)
    assert orjson.loads(events[-2].data)["choices"][0]["finish_reason"] == "length"


def test_official_openai_client_accepts_the_wire_format() -> None:
    with FakeUpstream(chunks=5) as up:
        client = openai.OpenAI(base_url=up.base_url, api_key="sk-anything", max_retries=0)
        reply = client.chat.completions.create(model="fake-chat", messages=USER)
        assert reply.choices[0].message.content == reply_text(5)
        assert reply.usage is not None and reply.usage.total_tokens == 3 + 5

        stream = client.chat.completions.create(
            model="fake-chat",
            messages=USER,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply_text(5)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5

        emb = client.embeddings.create(model="fake-embed", input=["a", "bb"])
        assert [d.embedding for d in emb.data] == [fake_embedding("a"), fake_embedding("bb")]
        assert emb.usage.prompt_tokens == 2

        assert [m.id for m in client.models.list()] == list(MODELS)
        client.close()


async def test_embeddings_are_deterministic_unit_vectors_in_float_and_base64(
    upstream: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    body = {"model": "e", "input": ["alpha", "beta"]}
    floats = await (await _post(session, upstream, "/embeddings", body)).json()
    assert floats["object"] == "list" and floats["model"] == "e"
    assert floats["usage"] == {"prompt_tokens": 2 + 2, "total_tokens": 4}
    vectors = [d["embedding"] for d in floats["data"]]
    assert [d["index"] for d in floats["data"]] == [0, 1]
    assert vectors == [fake_embedding("alpha"), fake_embedding("beta")]
    assert all(len(v) == DEFAULT_EMBEDDING_DIMS for v in vectors)
    assert abs(sum(x * x for x in vectors[0]) - 1.0) < 1e-5
    assert vectors[0] != vectors[1]

    b64 = await (await _post(session, upstream, "/embeddings", {**body, "encoding_format": "base64"})).json()
    decoded = [list(struct.unpack("<8f", base64.b64decode(d["embedding"]))) for d in b64["data"]]
    assert decoded == vectors

    tokens = await (await _post(session, upstream, "/embeddings", {"input": [1, 2, 3], "dimensions": 3})).json()
    assert len(tokens["data"]) == 1 and len(tokens["data"][0]["embedding"]) == 3
    assert tokens["usage"]["prompt_tokens"] == 3


async def test_models_route_lists_the_fake_models(upstream: FakeUpstream, session: aiohttp.ClientSession) -> None:
    resp = await session.get(upstream.base_url + "/models")
    body = await resp.json()
    assert body["object"] == "list"
    assert [(m["id"], m["object"]) for m in body["data"]] == [(m, "model") for m in MODELS]


async def test_429_carries_retry_after_and_openai_error_body(session: aiohttp.ClientSession) -> None:
    async with FakeUpstream(status=429, retry_after=1.5) as up:
        resp = await _post(session, up, "/chat/completions", {"messages": USER, "stream": True})
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "2"
        assert resp.headers["retry-after-ms"] == "1500"
        error = (await resp.json())["error"]
        assert error["type"] == "requests" and error["code"] == "rate_limit_exceeded"
        assert up.stats.completed == 1


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (400, "invalid_request_error", None),
        (401, "invalid_request_error", "invalid_api_key"),
        (500, "server_error", None),
    ],
)
async def test_error_statuses_return_openai_error_bodies(
    session: aiohttp.ClientSession, status: int, kind: str, code: str | None
) -> None:
    async with FakeUpstream(status=status) as up:
        resp = await _post(session, up, "/chat/completions", {"messages": USER})
        assert resp.status == status
        assert "Retry-After" not in resp.headers
        error = (await resp.json())["error"]
        assert (error["type"], error["code"], error["param"]) == (kind, code, None)
        assert error["message"]


async def test_any_authorization_is_accepted_and_recorded(
    upstream: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    resp = await session.post(
        upstream.base_url + "/chat/completions",
        json={"messages": USER},
        headers={"Authorization": "Bearer definitely-not-a-real-key"},
    )
    assert resp.status == 200
    await resp.read()
    stats = upstream.stats
    assert stats.last_headers["Authorization"] == "Bearer definitely-not-a-real-key"
    assert stats.last_body == {"messages": USER}


async def test_invalid_json_body_is_a_400(upstream: FakeUpstream, session: aiohttp.ClientSession) -> None:
    resp = await session.post(upstream.base_url + "/chat/completions", data=b"{nope")
    assert resp.status == 400
    assert (await resp.json())["error"]["type"] == "invalid_request_error"
    assert upstream.stats.last_body is None


async def test_hang_never_answers_and_client_timeout_counts_a_disconnect(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeUpstream(hang=True) as up:
        with pytest.raises(asyncio.TimeoutError):
            await session.post(
                up.base_url + "/chat/completions",
                json={"messages": USER},
                timeout=aiohttp.ClientTimeout(total=0.3),
            )
        await _eventually(lambda: up.stats.disconnects == 1)
        stats = up.stats
        assert (stats.completed, stats.in_flight) == (0, 0)


async def test_reader_closing_a_stream_early_counts_a_disconnect(session: aiohttp.ClientSession) -> None:
    async with FakeUpstream(chunk_delay_ms=30) as up:
        resp = await _post(session, up, "/chat/completions", {"messages": USER, "stream": True})
        parser = SSEParser()
        seen: list[SSEEvent] = []
        while len(seen) < 2:
            seen.extend(parser.feed(await resp.content.readany()))
        resp.close()
        await _eventually(lambda: up.stats.disconnects == 1)
        stats = up.stats
        assert (stats.completed, stats.in_flight) == (0, 0)


async def test_malformed_inserts_a_non_json_event_or_returns_a_garbage_body(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeUpstream(malformed=True, chunks=3) as up:
        events = await _events(await _post(session, up, "/chat/completions", {"messages": USER, "stream": True}))
        broken = []
        for event in events:
            try:
                orjson.loads(event.data)
            except orjson.JSONDecodeError:
                broken.append(event.data)
        assert broken == [b"{this is not json", b"[DONE]"]
        assert events[-1].data == b"[DONE]"

        resp = await _post(session, up, "/chat/completions", {"messages": USER})
        assert resp.status == 200
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(await resp.read())


async def test_disconnect_after_chunks_cuts_the_connection_without_done(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeUpstream(disconnect_after_chunks=3) as up:
        parser = SSEParser()
        events: list[SSEEvent] = []
        body = {"messages": USER, "stream": True}
        async with session.post(up.base_url + "/chat/completions", json=body) as resp:
            with pytest.raises(aiohttp.ClientPayloadError):
                async for chunk in resp.content.iter_any():
                    events.extend(parser.feed(chunk))
        assert len(events) == 1 + 3
        assert _content(events) == reply_text(3)
        await _eventually(lambda: up.stats.in_flight == 0)
        stats = up.stats
        assert (stats.completed, stats.disconnects) == (0, 0)


async def test_split_bytes_writes_each_event_in_pieces_even_inside_utf8(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeUpstream(split="bytes", chunks=12) as up:
        resp = await _post(session, up, "/chat/completions", {"messages": USER, "stream": True})
        writes = await _http_chunks(resp)
    stream = b"".join(writes)
    event_count = stream.count(b"\n\n")
    assert len(writes) >= 2 * event_count
    cut_mid_char = 0
    for piece in writes:
        try:
            piece.decode()
        except UnicodeDecodeError:
            cut_mid_char += 1
    assert cut_mid_char >= 3  # "—", "你好" and "🔥" are each cut
    parser = SSEParser()
    events = [e for w in writes for e in parser.feed(w)]
    assert _content(events) == reply_text(12)
    assert events[-1].data == b"[DONE]"


async def test_split_coalesce_writes_several_events_at_once(session: aiohttp.ClientSession) -> None:
    async with FakeUpstream(split="coalesce", chunks=6) as up:
        resp = await _post(session, up, "/chat/completions", {"messages": USER, "stream": True})
        writes = await _http_chunks(resp)
    assert [w.count(b"\n\n") for w in writes] == [3, 3, 3]
    parser = SSEParser()
    assert _content([e for w in writes for e in parser.feed(w)]) == reply_text(6)


async def test_latency_and_chunk_delay_slow_the_response(session: aiohttp.ClientSession) -> None:
    async with FakeUpstream(latency_ms=150) as up:
        start = time.monotonic()
        resp = await _post(session, up, "/chat/completions", {"messages": USER})
        assert time.monotonic() - start >= 0.14
        await resp.read()
    async with FakeUpstream(chunks=5, chunk_delay_ms=20) as up:
        start = time.monotonic()
        events = await _events(await _post(session, up, "/chat/completions", {"messages": USER, "stream": True}))
        assert len(events) == 8
        assert time.monotonic() - start >= 7 * 0.02 * 0.9


async def test_max_in_flight_reaches_50_under_50_parallel_slow_requests(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeUpstream(latency_ms=500) as up:

        async def one() -> int:
            async with session.post(up.base_url + "/chat/completions", json={"messages": USER}) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(one() for _ in range(50)))
        stats = up.stats
    assert statuses == [200] * 50
    assert (stats.requests, stats.max_in_flight, stats.in_flight, stats.completed) == (50, 50, 0, 50)
    assert stats.by_path == {"/v1/chat/completions": 50}


async def test_script_applies_behaviours_in_order_then_falls_back_to_defaults(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeUpstream(chunks=2) as up:
        up.script(FakeBehavior(status=429), {"status": 500}, {"chunks": 1})
        statuses, texts = [], []
        for _ in range(4):
            resp = await _post(session, up, "/chat/completions", {"messages": USER})
            statuses.append(resp.status)
            body = await resp.json()
            texts.append(body["choices"][0]["message"]["content"] if resp.status == 200 else None)
    assert statuses == [429, 500, 200, 200]
    assert texts == [None, None, reply_text(1), reply_text(2)]


async def test_http_control_endpoints(session: aiohttp.ClientSession) -> None:
    async with FakeUpstream() as up:
        root = up.root_url
        resp = await session.post(root + "/_fake/defaults", json={"chunks": 2, "latency_ms": 1})
        assert (await resp.json())["chunks"] == 2
        assert (await (await session.get(root + "/_fake/defaults")).json())["latency_ms"] == 1
        assert (await session.post(root + "/_fake/defaults", json={"nope": 1})).status == 400
        assert (await session.post(root + "/_fake/defaults", json={"split": "sideways"})).status == 400

        resp = await session.post(root + "/_fake/script", json=[{"status": 503}, {"chunks": 1}])
        assert await resp.json() == {"queued": 2}
        first = await _post(session, up, "/chat/completions", {"messages": USER})
        second = await (await _post(session, up, "/chat/completions", {"messages": USER})).json()
        third = await (await _post(session, up, "/chat/completions", {"messages": USER})).json()
        assert first.status == 503
        assert second["choices"][0]["message"]["content"] == reply_text(1)
        assert third["choices"][0]["message"]["content"] == reply_text(2)

        stats = await (await session.get(root + "/_fake/stats")).json()
        assert stats["requests"] == 3 and stats["completed"] == 3
        assert stats["by_path"] == {"/v1/chat/completions": 3}
        assert stats["last_body"] == {"messages": USER}
        assert set(stats) == {
            "requests",
            "by_path",
            "in_flight",
            "max_in_flight",
            "disconnects",
            "completed",
            "last_headers",
            "last_body",
        }

        await session.post(root + "/_fake/script", json=[{"status": 500}])
        assert (await session.post(root + "/_fake/reset")).status == 200
        stats = await (await session.get(root + "/_fake/stats")).json()
        assert stats["requests"] == 0 and stats["by_path"] == {}
        after = await (await _post(session, up, "/chat/completions", {"messages": USER})).json()
        assert after["choices"][0]["message"]["content"] == reply_text(2)

        await session.post(root + "/_fake/reset", json={"defaults": True})
        assert up.defaults == FakeBehavior()


async def test_anthropic_messages_non_stream(upstream: FakeUpstream, session: aiohttp.ClientSession) -> None:
    body = {"model": "claude-x", "max_tokens": 100, "system": "Be brief.", "messages": USER}
    resp = await _post(session, upstream, "/messages", body)
    message = await resp.json()
    input_tokens = (len("Be brief.") + len("hello there")) // 4 + 1
    assert message == {
        "id": "msg_fake_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": reply_text(20)}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 20},
    }


async def test_anthropic_messages_stream_event_sequence(upstream: FakeUpstream, session: aiohttp.ClientSession) -> None:
    body = {"model": "claude-x", "max_tokens": 3, "messages": USER, "stream": True}
    events = await _events(await _post(session, upstream, "/messages", body))
    names = [e.event for e in events]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    payloads = [orjson.loads(e.data) for e in events]
    assert [p["type"] for p in payloads] == names
    start = payloads[0]["message"]
    assert start["id"] == "msg_fake_1" and start["usage"]["input_tokens"] == 3
    assert "".join(p["delta"]["text"] for p in payloads[3:6]) == reply_text(3)
    assert payloads[7]["delta"]["stop_reason"] == "max_tokens"
    assert payloads[7]["usage"] == {"output_tokens": 3}


async def test_anthropic_errors_use_anthropic_format(session: aiohttp.ClientSession) -> None:
    async with FakeUpstream(status=429, retry_after=3) as up:
        resp = await _post(session, up, "/messages", {"max_tokens": 5, "messages": USER})
        assert resp.status == 429 and resp.headers["Retry-After"] == "3"
        assert await resp.json() == {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "HTTP 429"},
        }


def test_thread_mode_serves_while_the_calling_thread_blocks() -> None:
    with FakeUpstream(chunks=1) as up:
        resp = httpx.post(up.base_url + "/chat/completions", json={"messages": USER})
        assert resp.json()["choices"][0]["message"]["content"] == reply_text(1)
        up.reset()
        assert up.stats.requests == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(up.base_url + "/models")


def test_invalid_behaviour_is_rejected() -> None:
    with pytest.raises(ValueError):
        FakeBehavior(split="sideways")
    with pytest.raises(ValueError):
        FakeBehavior(status=302)
    with pytest.raises(TypeError):
        FakeUpstream(no_such_knob=1)


def test_run_entry_point_serves_until_sigterm() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = f"from hearth.testing.fake_upstream import run; run('127.0.0.1', {port}, chunks=2)"
    with subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, env=os.environ.copy()) as proc:
        try:
            assert proc.stderr is not None
            assert f"127.0.0.1:{port}/v1" in proc.stderr.readline().decode()
            reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"messages": USER})
            assert reply.json()["choices"][0]["message"]["content"] == reply_text(2)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
