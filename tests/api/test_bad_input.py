"""Bad input is a 4xx, never a 500 or 503: request validation as OpenAI does it, JSON depth, body size.

Every case goes over real HTTP to a Hearth test server backed by the fake upstream; a refused request
must never reach the upstream.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from hearth.api.chat_validation import MAX_OUTPUT_TOKENS
from hearth.api.request_body import MAX_JSON_DEPTH, json_too_deep, parse_json_object
from hearth.errors import HearthError
from tests.support import AUTH, gateway_registry

USER = {"role": "user", "content": "hi"}


def _registry(fake: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up", "capabilities": ["chat", "streaming", "tools", "json", "vision"]},
                            {"name": "e", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "emb", "capabilities": ["embeddings"]}])
    reg["models"] = [{"name": "m", "endpoints": ["a"]}, {"name": "emb", "kind": "embedding", "endpoints": ["e"]}]
    return reg


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **fields}


def _msgs(*messages: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages)}


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}

INVALID_CHAT: list[tuple[dict[str, Any], str]] = [
    # messages and their items
    ({"model": "m", "messages": {"role": "user"}}, "messages"),
    ({"model": "m", "messages": "hello"}, "messages"),
    (_msgs("hello"), "messages[0]"),
    (_msgs(["user", "hi"]), "messages[0]"),
    (_msgs({"role": 1, "content": "x"}), "messages[0].role"),
    (_msgs({"role": ["user"], "content": "x"}), "messages[0].role"),
    (_msgs({"role": {"user": 1}, "content": "x"}), "messages[0].role"),
    (_msgs({"role": None, "content": "x"}), "messages[0].role"),
    (_msgs({"content": "x"}), "messages[0].role"),
    (_msgs(USER, {"role": "robot", "content": "x"}), "messages[1].role"),
    (_msgs({"role": "user", "content": 5}), "messages[0].content"),
    (_msgs({"role": "user", "content": {"text": "x"}}), "messages[0].content"),
    (_msgs({"role": "user", "content": True}), "messages[0].content"),
    (_msgs({"role": "user"}), "messages[0].content"),
    (_msgs({"role": "user", "content": None}), "messages[0].content"),
    (_msgs({"role": "assistant", "content": None}), "messages[0].content"),
    (_msgs({"role": "user", "content": []}), "messages[0].content"),
    (_msgs({"role": "user", "content": ["text"]}), "messages[0].content[0]"),
    (_msgs({"role": "user", "content": [{"text": "x"}]}), "messages[0].content[0].type"),
    (_msgs({"role": "user", "content": [{"type": 3, "text": "x"}]}), "messages[0].content[0].type"),
    (_msgs({"role": "user", "content": [{"type": "text", "text": 3}]}), "messages[0].content[0].text"),
    (_msgs({"role": "user", "content": [{"type": "text"}]}), "messages[0].content[0].text"),
    (_msgs({"role": "user", "content": [{"type": "image_url", "image_url": 7}]}),
     "messages[0].content[0].image_url.url"),
    (_msgs({"role": "user", "name": 5, "content": "x"}), "messages[0].name"),
    (_msgs({"role": "assistant", "content": None, "tool_calls": "call"}), "messages[0].tool_calls"),
    (_msgs({"role": "assistant", "content": None, "tool_calls": [{"id": 1}]}), "messages[0].tool_calls[0].id"),
    (_msgs({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": "f"}]}),
     "messages[0].tool_calls[0].function"),
    (_msgs({"role": "tool", "content": "42"}), "messages[0].tool_call_id"),
    (_msgs({"role": "tool", "content": "42", "tool_call_id": 9}), "messages[0].tool_call_id"),
    # sampling and limits
    (_chat(temperature=2.5), "temperature"),
    (_chat(temperature=-0.1), "temperature"),
    (_chat(temperature="hot"), "temperature"),
    (_chat(temperature=True), "temperature"),
    (_chat(top_p=1.5), "top_p"),
    (_chat(top_p=[1]), "top_p"),
    (_chat(n=0), "n"),
    (_chat(n=1.5), "n"),
    (_chat(n=10_000), "n"),
    (_chat(n=True), "n"),
    (_chat(presence_penalty=3), "presence_penalty"),
    (_chat(frequency_penalty=-2.01), "frequency_penalty"),
    (_chat(max_tokens=0), "max_tokens"),
    (_chat(max_tokens=-5), "max_tokens"),
    (_chat(max_tokens=True), "max_tokens"),
    (_chat(max_tokens="100"), "max_tokens"),
    (_chat(max_tokens=12.0), "max_tokens"),
    (_chat(max_tokens=MAX_OUTPUT_TOKENS + 1), "max_tokens"),
    (_chat(max_tokens=2**31), "max_tokens"),
    (_chat(max_tokens=2**63 - 1), "max_tokens"),
    (_chat(max_completion_tokens=2**40), "max_completion_tokens"),
    (_chat(seed=1.5), "seed"),
    (_chat(top_logprobs=21), "top_logprobs"),
    (_chat(logprobs="yes"), "logprobs"),
    (_chat(logit_bias={"50256": 101}), "logit_bias.50256"),
    (_chat(logit_bias=[1]), "logit_bias"),
    # stop, tools, formats
    (_chat(stop=5), "stop"),
    (_chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    (_chat(stop=["a", 1]), "stop"),
    (_chat(tools={"type": "function"}), "tools"),
    (_chat(tools=["lookup"]), "tools[0]"),
    (_chat(tools=[{"type": "retrieval"}]), "tools[0].type"),
    (_chat(tools=[{"type": "function"}]), "tools[0].function"),
    (_chat(tools=[{"type": "function", "function": {"name": 1}}]), "tools[0].function.name"),
    (_chat(tools=[{"type": "function", "function": {"name": ""}}]), "tools[0].function.name"),
    (_chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "{}"}}]),
     "tools[0].function.parameters"),
    (_chat(tools=[TOOL] * 129), "tools"),
    (_chat(tool_choice="sometimes"), "tool_choice"),
    (_chat(tool_choice=3), "tool_choice"),
    (_chat(tool_choice={"type": "function", "function": {"name": 3}}), "tool_choice.function.name"),
    (_chat(parallel_tool_calls="no"), "parallel_tool_calls"),
    (_chat(response_format="json"), "response_format.type"),
    (_chat(response_format={"type": ["json_object"]}), "response_format.type"),
    (_chat(response_format={"type": "json_schema"}), "response_format.json_schema"),
    # other fields
    (_chat(stream="yes"), "stream"),
    (_chat(stream=1), "stream"),
    (_chat(stream_options={"include_usage": True}), "stream_options"),
    (_chat(stream=True, stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    (_chat(stream=True, stream_options=[True]), "stream_options"),
    (_chat(user=42), "user"),
    (_chat(user=["u"]), "user"),
    (_chat(metadata="x"), "metadata"),
    ({"model": 7, "messages": [USER]}, "model"),
    ({"model": ["m"], "messages": [USER]}, "model"),
    ({"model": "", "messages": [USER]}, "model"),
    ({"model": "m" * 257, "messages": [USER]}, "model"),
]


async def test_invalid_chat_bodies_are_400_with_param_and_never_reach_upstream(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    url = server.base_url + "/v1/chat/completions"
    failures = []
    for body, param in INVALID_CHAT:
        for stream in (False, True):
            sent = {**body, "stream": True} if stream and "stream" not in body and "stream_options" not in body \
                else body
            r = await http.post(url, json=sent, headers=AUTH)
            err = r.json().get("error") or {}
            if (r.status_code, err.get("code"), err.get("param"), err.get("type")) != (
                    400, "invalid_request", param, "invalid_request_error"):
                failures.append((sent, r.status_code, r.text[:200]))
    assert not failures, failures
    assert fake.stats.requests == 0


VALID_CHAT: list[dict[str, Any]] = [
    _chat(),
    _chat(temperature=0, top_p=1, n=1, presence_penalty=-2, frequency_penalty=2.0, max_tokens=MAX_OUTPUT_TOKENS),
    _chat(temperature=2.0, top_p=0.0, max_completion_tokens=16, seed=-(2**63), stop="END"),
    _chat(stop=["a", "b", "c", "d"], user="u-1", metadata={"k": "v"}, logprobs=True, top_logprobs=3,
          logit_bias={"50256": -100}),
    _chat(temperature=None, top_p=None, stop=None, tools=None, user=None, max_tokens=None),
    _chat(tools=[TOOL], tool_choice="auto", parallel_tool_calls=False),
    _chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "lookup"}}),
    _chat(response_format={"type": "json_object"}),
    _chat(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}),
    _chat(x_vendor_extension={"anything": [1, 2, {"deep": True}]}),
    _msgs({"role": "system", "content": "be brief"}, {"role": "developer", "content": [{"type": "text", "text": "x"}]},
          {"role": "user", "name": "ann", "content": [
              {"type": "text", "text": "what is this?"},
              {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png", "detail": "low"}}]},
          {"role": "assistant", "content": None, "tool_calls": [CALL]},
          {"role": "tool", "tool_call_id": "call_1", "content": "42"},
          {"role": "assistant", "content": [{"type": "text", "text": "ok"}, {"type": "refusal", "refusal": "no"}]},
          {"role": "user", "content": ""}),
    {"messages": [USER], "model": "m", "stream": False},
]


async def test_valid_chat_bodies_pass_validation(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    url = server.base_url + "/v1/chat/completions"
    for body in VALID_CHAT:
        r = await http.post(url, json=body, headers=AUTH)
        assert r.status_code == 200, (body, r.text)
    r = await http.post(url, json=_chat(stream=True, stream_options={"include_usage": True}), headers=AUTH)
    assert r.status_code == 200 and "[DONE]" in r.text
    assert fake.stats.requests == len(VALID_CHAT) + 1


INVALID_EMBEDDINGS: list[tuple[dict[str, Any], str]] = [
    ({"model": "emb"}, "input"),
    ({"model": "emb", "input": ""}, "input"),
    ({"model": "emb", "input": []}, "input"),
    ({"model": "emb", "input": 5}, "input"),
    ({"model": "emb", "input": {"text": "a"}}, "input"),
    ({"model": "emb", "input": ["a", 5]}, "input[1]"),
    ({"model": "emb", "input": ["a", ""]}, "input[1]"),
    ({"model": "emb", "input": [1, "a"]}, "input[1]"),
    ({"model": "emb", "input": [1, -1]}, "input[1]"),
    ({"model": "emb", "input": [2**40]}, "input[0]"),
    ({"model": "emb", "input": [True]}, "input[0]"),
    ({"model": "emb", "input": [[1, 2], [3, "x"]]}, "input[1][1]"),
    ({"model": "emb", "input": [[1], []]}, "input[1]"),
    ({"model": "emb", "input": [None]}, "input[0]"),
    ({"model": "emb", "input": ["a"] * 2049}, "input"),
    ({"model": 3, "input": "a"}, "model"),
    ({"model": "emb", "input": "a", "dimensions": 0}, "dimensions"),
    ({"model": "emb", "input": "a", "dimensions": 2**40}, "dimensions"),
    ({"model": "emb", "input": "a", "encoding_format": "hex"}, "encoding_format"),
    ({"model": "emb", "input": "a", "encoding_format": ["float"]}, "encoding_format"),
    ({"model": "emb", "input": "a", "user": {}}, "user"),
]


async def test_embeddings_validation(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    url = server.base_url + "/v1/embeddings"
    for body, param in INVALID_EMBEDDINGS:
        r = await http.post(url, json=body, headers=AUTH)
        assert r.status_code == 400, (body, r.text)
        assert (r.json()["error"]["code"], r.json()["error"]["param"]) == ("invalid_request", param), body
    assert fake.stats.requests == 0
    for body in ({"model": "emb", "input": "a"}, {"model": "emb", "input": ["a", "b"], "encoding_format": "float"},
                 {"model": "emb", "input": [1, 2, 3]}, {"model": "emb", "input": [[1, 2], [3]], "dimensions": 8}):
        r = await http.post(url, json=body, headers=AUTH)
        assert r.status_code == 200, (body, r.text)


def _nested(depth: int) -> bytes:
    """A chat body whose deepest value sits ``depth`` levels down (the body object is level 1)."""
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return b'{"model":"m","messages":[{"role":"user","content":"hi"}],"x_extra":' + inner + b"}"


async def test_json_nested_too_deep_is_refused_at_parse_time(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    url = server.base_url + "/v1/chat/completions"
    ok = await http.post(url, content=_nested(MAX_JSON_DEPTH), headers=AUTH)
    assert ok.status_code == 200, ok.text
    for depth in (MAX_JSON_DEPTH + 1, 500, 1100, 100_000):
        r = await http.post(url, content=_nested(depth), headers=AUTH)
        assert r.status_code == 400, (depth, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_json" and "nested too deep" in err["message"], err
    objects = b'{"a":' * 80 + b"1" + b"}" * 80
    r = await http.post(url, content=objects, headers=AUTH)
    assert r.status_code == 400 and "nested too deep" in r.json()["error"]["message"]
    # the admin API parses with the same function
    r = await http.put(server.base_url + "/api/v1/admin/providers/p1", content=objects,
                       headers={"Authorization": "Bearer admin-token-xyz"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert fake.stats.requests == 1


@pytest.mark.parametrize("raw", [
    b"", b"   ", b"{", b"nul", b'{"a": 1e400}', b'{"a": "\\ud800"}', b"\xff\xfe{}", b'{"a": NaN}',
    b'{"a": Infinity}', b"[" * 2000, b'"just a string"', b"[1, 2]", b"42", b"null",
    '{"model": "m", "messages": [{"role": "user", "content": "caf\u00e9"}]}'.encode("latin-1"),
])
def test_parse_json_object_refuses_with_400_whatever_orjson_raises(raw):
    with pytest.raises(HearthError) as info:
        parse_json_object(raw)
    assert info.value.code == "invalid_json" and info.value.status == 400


def test_depth_walk_matches_the_limit_exactly():
    for depth in (1, 2, 63, 64, 65, 200):
        value = orjson.loads(b"[" * depth + b"]" * depth)
        assert json_too_deep(value) is (depth > MAX_JSON_DEPTH), depth
        wrapped = {"a": 1, "b": [{"c": value}]}  # three more levels
        assert json_too_deep(wrapped) is (depth + 3 > MAX_JSON_DEPTH), depth
    # brackets inside strings do not count
    assert parse_json_object(b'{"s": "' + b"[" * 500 + b'"}') == {"s": "[" * 500}


async def test_bad_bytes_get_invalid_json_over_http(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    url = server.base_url + "/v1/chat/completions"
    for raw in (b'{"a": "\\ud800"}', b"\xff", b'{"model": 1e999}', b"[" * 5000):
        r = await http.post(url, content=raw, headers=AUTH)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json", (raw[:20], r.text)


async def _raw_exchange(port: int, head: bytes, chunks: list[bytes], read_timeout: float = 5.0) -> bytes:
    """Send a request head and some body bytes, never finish the body, and read what the server answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), read_timeout) + \
            await asyncio.wait_for(reader.read(2000), read_timeout)
    finally:
        writer.close()


async def test_chunked_body_is_refused_the_moment_it_passes_the_limit(fake, hearth_server, http):
    server = hearth_server(_registry(fake), max_request_bytes=10_000)
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key-123\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * 4000
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    # 12 000 bytes sent, the terminating chunk never: the answer must come anyway
    answer = await _raw_exchange(server.port, head, [chunk, chunk, chunk])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"request_too_large"' in answer
    # an over-long declared Content-Length is refused before any body byte arrives
    head_cl = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key-123\r\n"
               b"Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n")
    answer = await _raw_exchange(server.port, head_cl, [])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # a chunked body under the limit works, and the server keeps serving
    body = orjson.dumps(_chat())

    async def chunks() -> Any:
        for i in range(0, len(body), 10):
            yield body[i:i + 10]

    r = await http.post(server.base_url + "/v1/chat/completions", content=chunks(),
                        headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert fake.stats.requests == 1
