"""Non-stream and stream relays through Hearth to an OpenAI-compatible upstream."""

from __future__ import annotations

from typing import Any

import orjson

from hearth.wire.sse import SSEParser
from tests.support import AUTH, chat_body, gateway_registry


def _ep(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up-model",
            "api_key": "sk-upstream-" + name + "-0123456789", **extra}


async def test_non_stream_relays_upstream_body_and_forwards_upstream_model_and_key(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["usage"]["prompt_tokens"] > 0
    assert fake.stats.last_body["model"] == "up-model"
    assert fake.stats.last_headers["Authorization"] == "Bearer sk-upstream-a-0123456789"
    assert r.headers["x-request-id"]


async def test_stream_with_usage_ends_with_usage_chunk_and_done(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    body = chat_body(stream=True, stream_options={"include_usage": True})
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=body, headers=AUTH) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join([c async for c in r.aiter_raw()])
    events = SSEParser().feed(raw)
    assert events[-1].data == b"[DONE]"
    last = orjson.loads(events[-2].data)
    assert last["choices"] == [] and last["usage"]["completion_tokens"] > 0


async def test_stream_without_include_usage_drops_the_usage_chunk_hearth_asked_for(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        raw = b"".join([c async for c in r.aiter_raw()])
    events = SSEParser().feed(raw)
    assert fake.stats.last_body["stream_options"] == {"include_usage": True}
    payloads = [orjson.loads(e.data) for e in events[:-1]]
    assert all(p["choices"] for p in payloads)
