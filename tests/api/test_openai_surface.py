"""The OpenAI surface: validation errors in OpenAI's shape, request ids, models, embeddings, OpenAPI."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import AUTH, chat_body, gateway_registry


def _registry(fake: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up"},
                            {"name": "e", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "emb", "capabilities": ["embeddings"]}])
    reg["models"] = [{"name": "m", "endpoints": ["a"]}, {"name": "emb", "kind": "embedding", "endpoints": ["e"]}]
    return reg


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m"}, "messages"),
    ({"model": "m", "messages": []}, "messages"),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {}}, "stream_options"),
    ({"messages": [{"role": "user", "content": "x"}]}, "model"),
])
async def test_invalid_chat_bodies_get_openai_400s_and_never_reach_upstream(body, param, fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.post(server.base_url + "/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert fake.stats.requests == 0


async def test_non_json_and_oversized_bodies(fake, hearth_server, http):
    server = hearth_server(_registry(fake), max_request_bytes=1000)
    r = await http.post(server.base_url + "/v1/chat/completions", content=b"{not json", headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body("x" * 2000), headers=AUTH)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


async def test_request_id_is_echoed_or_generated(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers={
        **AUTH, "X-Request-Id": "caller-chosen-42"})
    assert r.headers["x-request-id"] == "caller-chosen-42"
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers={
        **AUTH, "X-Request-Id": "bad id with spaces;"})
    assert r.headers["x-request-id"] != "bad id with spaces" and len(r.headers["x-request-id"]) == 32


async def test_embeddings_relay_to_an_embedding_pool(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.post(server.base_url + "/v1/embeddings", json={"model": "emb", "input": ["a", "b"]}, headers=AUTH)
    assert r.status_code == 200 and len(r.json()["data"]) == 2
    assert fake.stats.by_path == {"/v1/embeddings": 1} and fake.stats.last_body["model"] == "emb"
    wrong_kind = await http.post(server.base_url + "/v1/embeddings", json={"model": "m", "input": "a"}, headers=AUTH)
    assert wrong_kind.status_code == 404


async def test_models_list_and_retrieve(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    listed = (await http.get(server.base_url + "/v1/models", headers=AUTH)).json()
    assert [m["id"] for m in listed["data"]] == ["emb", "m"]
    assert (await http.get(server.base_url + "/v1/models/m", headers=AUTH)).json()["id"] == "m"
    assert (await http.get(server.base_url + "/v1/models/zz", headers=AUTH)).status_code == 404


async def test_openapi_documents_the_openai_routes(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    spec = (await http.get(server.base_url + "/openapi.json")).json()
    post = spec["paths"]["/v1/chat/completions"]["post"]
    assert "requestBody" in post and "ChatCompletion" in str(post["responses"]["200"])
    assert "OpenAIError" in spec["components"]["schemas"]
