"""Endpoint capabilities are part of routing: a request is sent only to endpoints that can serve it.

What a request needs is read from its body (``stream``, ``tools``, a JSON ``response_format``, image
parts) and its route (embeddings); endpoints without it are skipped, and only when no endpoint of the
model (nor of a scene's fallbacks) has it does the caller get 400 ``unsupported_feature``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import AUTH, chat_body, gateway_registry

BASIC = ["chat", "streaming"]
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
IMAGE = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]


def _ep(name: str, base_url: str, capabilities: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", "capabilities": capabilities, **extra}


async def _chat(http: Any, server: Any, body: dict[str, Any]) -> Any:
    return await http.post(server.base_url + "/v1/chat/completions", json=body, headers=AUTH)


@pytest.mark.parametrize(("extra", "capability"), [
    ({"tools": [TOOL]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "json"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}, "json"),
])
async def test_a_request_skips_endpoints_without_the_capability_it_needs(extra, capability, fake, fake2,
                                                                        hearth_server, http):
    # `a` is preferred (priority 0) but lacks the capability; `b` has it
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, BASIC, priority=0),
                                             _ep("b", fake2.base_url, [*BASIC, capability], priority=1)]))
    for _ in range(3):
        r = await _chat(http, server, chat_body(**extra))
        assert r.status_code == 200, r.text
        assert r.headers["x-hearth-endpoint"] == "b" and r.headers["x-hearth-attempts"] == "1"
    assert fake.stats.requests == 0
    plain = await _chat(http, server, chat_body())  # a request needing nothing special keeps its preference
    assert plain.headers["x-hearth-endpoint"] == "a"


async def test_image_parts_need_a_vision_endpoint(fake, fake2, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, BASIC, priority=0),
                                             _ep("b", fake2.base_url, [*BASIC, "vision"], priority=1)]))
    r = await _chat(http, server, {"model": "m", "messages": [{"role": "user", "content": IMAGE}]})
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
    assert fake.stats.requests == 0


async def test_a_stream_skips_endpoints_that_cannot_stream(fake, fake2, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, ["chat"], priority=0),
                                             _ep("b", fake2.base_url, BASIC, priority=1)]))
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        body = (await r.aread()).decode()
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
    assert "[DONE]" in body
    assert fake.stats.requests == 0


@pytest.mark.parametrize(("extra", "capability", "param"), [
    ({"tools": [TOOL]}, "tools", "tools"),
    ({"response_format": {"type": "json_object"}}, "json", "response_format"),
    ({"stream": True}, "streaming", "stream"),
])
async def test_no_endpoint_with_the_capability_is_400_unsupported_feature_naming_it(
        extra, capability, param, fake, hearth_server, http):
    caps = ["chat"] if capability == "streaming" else BASIC
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, caps)]))
    r = await _chat(http, server, chat_body(**extra))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "unsupported_feature" and error["param"] == param
    assert capability in error["message"]
    assert r.headers["x-should-retry"] == "false"
    assert fake.stats.requests == 0


async def test_an_embedding_pool_without_the_embeddings_capability_is_unsupported(fake, hearth_server, http):
    registry = gateway_registry([_ep("a", fake.base_url, BASIC)])
    registry["endpoints"].append(_ep("e", fake.base_url, BASIC))
    registry["models"].append({"name": "emb", "kind": "embedding", "endpoints": ["e"]})
    server = hearth_server(registry)
    r = await http.post(server.base_url + "/v1/embeddings", json={"model": "emb", "input": "x"}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_feature"
    assert "embeddings" in r.json()["error"]["message"]
    assert fake.stats.requests == 0


async def test_a_scene_default_route_falls_back_to_a_model_that_has_the_capability(fake, fake2, hearth_server,
                                                                                   http):
    registry = gateway_registry([_ep("a", fake.base_url, BASIC), _ep("b", fake2.base_url, [*BASIC, "tools"])])
    registry["models"] = [{"name": "plain", "endpoints": ["a"]}, {"name": "tooled", "endpoints": ["b"]}]
    registry["scenes"] = [{"name": "assist", "default_model": "plain", "fallback_models": ["tooled"]}]
    registry["callers"][0]["default_scene"] = "assist"
    server = hearth_server(registry)
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL]}
    r = await _chat(http, server, body)
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-endpoint"] == "b" and r.headers["x-hearth-model"] == "tooled"
    assert fake.stats.requests == 0
    # an explicitly named model never falls back: it has no endpoint with tools
    named = await _chat(http, server, {**body, "model": "plain"})
    assert named.status_code == 400 and named.json()["error"]["code"] == "unsupported_feature"
