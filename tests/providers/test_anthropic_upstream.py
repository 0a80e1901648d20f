"""An Anthropic Messages upstream behind the OpenAI surface: translated both ways, streams included."""

from __future__ import annotations

from typing import Any

import orjson

from hearth.testing.fake_upstream import reply_text
from hearth.wire.sse import SSEParser
from tests.support import AUTH, chat_body, gateway_registry


def _registry(fake: Any) -> dict[str, Any]:
    return gateway_registry([{"name": "claude", "provider": "anthropic-like", "base_url": fake.base_url,
                              "upstream_model": "claude-test", "api_key": "sk-ant-test-key-0000"}])


async def test_non_stream_is_translated_to_a_chat_completion(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    body = {"model": "m", "max_tokens": 50,
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
    r = await http.post(server.base_url + "/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["content"] == reply_text(20)
    assert out["usage"]["completion_tokens"] == 20
    sent = fake.stats.last_body
    assert fake.stats.by_path == {"/v1/messages": 1}
    assert sent["system"] == "be brief" and sent["model"] == "claude-test" and sent["max_tokens"] == 50
    assert fake.stats.last_headers["x-api-key"] == "sk-ant-test-key-0000"
    assert fake.stats.last_headers["anthropic-version"]


async def test_stream_is_translated_to_openai_chunks_with_usage(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(split="bytes")
    body = chat_body(stream=True, stream_options={"include_usage": True})
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=body, headers=AUTH) as r:
        raw = b"".join([c async for c in r.aiter_raw()])
    events = [e.data for e in SSEParser().feed(raw)]
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == reply_text(20)
    assert chunks[-1]["usage"]["completion_tokens"] == 20


async def test_request_anthropic_cannot_express_is_a_400_before_any_call(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(n=2), headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_feature"
    assert fake.stats.requests == 0


async def test_anthropic_errors_are_classified_like_any_upstream(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(status=400)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    fake.set_defaults(status=529)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"
