"""What a relayed stream's chunks say: the public model name, and a usage chunk the caller asked for."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from hearth.testing.fake_upstream import prompt_tokens_for
from hearth.wire.sse import SSEParser
from hearth.wire.tokens import estimate_messages, estimate_text
from tests.support import AUTH, chat_body, gateway_registry, request_log_row


def _registry(fake: Any, **model_options: Any) -> dict[str, Any]:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up-model-7b", "api_key": "sk-key-of-a-abcdef"}])
    registry["models"][0].update(model_options)
    return registry


async def _chunks(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    async with http.stream("POST", url, json=body, headers=AUTH) as r:
        assert r.status_code == 200, await r.aread()
        raw = b"".join([c async for c in r.aiter_raw()])
        rid = r.headers["x-request-id"]
    events = [e.data for e in SSEParser().feed(raw)]
    assert events[-1] == b"[DONE]", events[-1]
    return [orjson.loads(e) for e in events[:-1]], rid



async def test_stream_chunks_show_the_public_model_name(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=5)
    chunks, _ = await _chunks(http, server.base_url + "/v1/chat/completions",
                              chat_body(stream=True, stream_options={"include_usage": True}))
    assert len(chunks) == 5 + 3  # role, 5 pieces, finish, usage
    assert {c["model"] for c in chunks} == {"m"}
    assert fake.stats.last_body["model"] == "up-model-7b"  # the upstream still got its own name


async def test_a_model_may_show_the_upstream_name_in_stream_chunks(fake, hearth_server, http):
    server = hearth_server(_registry(fake, expose_upstream_model=True))
    chunks, _ = await _chunks(http, server.base_url + "/v1/chat/completions", chat_body(stream=True))
    assert {c["model"] for c in chunks} == {"up-model-7b"}


async def test_usage_chunk_is_synthesized_when_asked_for_and_the_upstream_sent_none(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=6, usage_in_stream=False)
    body = chat_body("count these words please", stream=True, stream_options={"include_usage": True})
    chunks, rid = await _chunks(http, server.base_url + "/v1/chat/completions", body)
    last = chunks[-1]
    assert last["choices"] == [] and last["object"] == "chat.completion.chunk"
    assert last["id"] == chunks[0]["id"] and last["model"] == "m" and last["created"] == chunks[0]["created"]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    usage = last["usage"]
    prompt, completion = estimate_messages(body["messages"]), estimate_text(text)
    assert usage == {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion, "hearth_estimated": True}
    assert [c for c in chunks[:-1] if c.get("usage")] == []  # exactly one usage chunk, the last
    row = await request_log_row(http, server, rid)
    assert row["usage_estimated"] is True
    assert (row["prompt_tokens"], row["completion_tokens"]) == (prompt, completion)


async def test_the_upstream_usage_chunk_is_relayed_as_is_and_none_is_added(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=4)
    body = chat_body("hi", stream=True, stream_options={"include_usage": True})
    chunks, rid = await _chunks(http, server.base_url + "/v1/chat/completions", body)
    with_usage = [c for c in chunks if c.get("usage")]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
    prompt = prompt_tokens_for(body["messages"])
    assert chunks[-1]["usage"] == {"prompt_tokens": prompt, "completion_tokens": 4, "total_tokens": prompt + 4}
    assert (await request_log_row(http, server, rid))["usage_estimated"] is False


@pytest.mark.parametrize("options", [None, {"include_usage": False}])
async def test_no_usage_chunk_unless_asked_for(options, fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=3, usage_in_stream=False)
    body = chat_body(stream=True, **({"stream_options": options} if options is not None else {}))
    chunks, _ = await _chunks(http, server.base_url + "/v1/chat/completions", body)
    assert all(c["choices"] for c in chunks) and not any(c.get("usage") for c in chunks)


async def test_the_official_sdk_reads_a_synthesized_usage_chunk(fake, hearth_server):
    openai = pytest.importorskip("openai")
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=3, usage_in_stream=False)
    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="test-key-123", max_retries=0)
    try:
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}],
                                                      stream=True, stream_options={"include_usage": True})
        chunks = [c async for c in stream]
    finally:
        await client.close()
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].choices == [] and {c.model for c in chunks} == {"m"}


def test_the_chunk_renamer_agrees_with_the_general_splice() -> None:
    from hearth.wire.model_name import ChunkRenamer, public_model_body

    rename = ChunkRenamer("up-model-7b", "pub")
    compact = b'{"id":"x","model":"up-model-7b","choices":[{"delta":{"content":"\\"model\\":\\"up-model-7b\\""}}]}'
    spaced = b'{"id": "x", "model": "up-model-7b", "choices": []}'
    other = b'{"id":"x","model":"another-upstream","choices":[]}'
    for chunk in (compact, spaced, other, b'{"id":"x","choices":[]}'):
        assert orjson.loads(rename(chunk)) == orjson.loads(public_model_body(chunk, "pub")), chunk
    assert orjson.loads(rename(compact))["choices"][0]["delta"]["content"] == '"model":"up-model-7b"'
