"""``/v1/models`` and ``/v1/models/{id}`` show a caller only the models it may use.

A model outside the caller's ``allowed_models``, or — for a caller bound to scenes (``allowed_scenes``
or a ``default_scene``) — a chat model in none of its scenes (default, allowed and fallback models),
is answered exactly as OpenAI answers an unknown model: 404 ``model_not_found``.
"""

from __future__ import annotations

from typing import Any

from tests.support import gateway_registry

CHAT = ["alpha", "beta", "gamma", "delta"]


def _registry(fake: Any, callers: list[dict[str, Any]]) -> dict[str, Any]:
    registry = gateway_registry([{"name": "ep", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"},
                                 {"name": "ep-emb", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up-emb", "capabilities": ["embeddings"]}])
    registry["models"] = [*({"name": n, "endpoints": ["ep"]} for n in CHAT),
                          {"name": "emb", "kind": "embedding", "endpoints": ["ep-emb"]},
                          {"name": "off", "endpoints": ["ep"], "enabled": False}]
    registry["scenes"] = [
        {"name": "chat", "default_model": "alpha", "allowed_models": ["beta"], "fallback_models": ["gamma"]},
        {"name": "batch", "default_model": "delta"},
    ]
    registry["callers"] = callers
    return registry


async def _visible(http: Any, server: Any, key: str) -> list[str]:
    r = await http.get(server.base_url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list"
    return [m["id"] for m in body["data"]]


async def _not_found(http: Any, server: Any, key: str, model: str) -> None:
    r = await http.get(server.base_url + f"/v1/models/{model}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 404, r.text
    assert r.json() == {"error": {"message": f"The model `{model}` does not exist or you do not have access to it.",
                                  "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}


async def _found(http: Any, server: Any, key: str, model: str) -> None:
    r = await http.get(server.base_url + f"/v1/models/{model}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == model and r.json()["object"] == "model"


async def test_a_caller_without_restrictions_sees_every_enabled_model(fake, hearth_server, http):
    server = hearth_server(_registry(fake, [{"name": "free", "key": "free-key-123"}]))
    assert await _visible(http, server, "free-key-123") == sorted([*CHAT, "emb"])
    await _found(http, server, "free-key-123", "delta")
    await _not_found(http, server, "free-key-123", "off")
    await _not_found(http, server, "free-key-123", "nope")


async def test_the_allowlist_hides_other_models(fake, hearth_server, http):
    caller = {"name": "narrow", "key": "narrow-key-1", "allowed_models": ["beta", "emb"]}
    server = hearth_server(_registry(fake, [caller]))
    assert await _visible(http, server, "narrow-key-1") == ["beta", "emb"]
    await _found(http, server, "narrow-key-1", "beta")
    await _not_found(http, server, "narrow-key-1", "alpha")


async def test_allowed_scenes_show_their_models_and_fallbacks(fake, hearth_server, http):
    server = hearth_server(_registry(fake, [{"name": "scened", "key": "scened-key-1", "allowed_scenes": ["chat"]}]))
    # chat's default, allowed and fallback models; embeddings have no scene, so they stay visible
    assert await _visible(http, server, "scened-key-1") == ["alpha", "beta", "emb", "gamma"]
    await _found(http, server, "scened-key-1", "gamma")
    await _not_found(http, server, "scened-key-1", "delta")


async def test_a_default_scene_with_an_allowlist(fake, hearth_server, http):
    caller = {"name": "both", "key": "both-key-12", "default_scene": "batch", "allowed_scenes": ["batch"],
              "allowed_models": ["alpha", "delta"]}
    server = hearth_server(_registry(fake, [caller]))
    assert await _visible(http, server, "both-key-12") == ["delta"]
    await _not_found(http, server, "both-key-12", "alpha")  # allowed by name, but in none of its scenes
    await _not_found(http, server, "both-key-12", "emb")  # not on its allowlist


async def test_models_of_another_caller_are_not_shown_through_the_openai_sdk(fake, hearth_server, http):
    import openai

    server = hearth_server(_registry(fake, [{"name": "narrow", "key": "narrow-key-1", "allowed_models": ["beta"]}]))
    client = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="narrow-key-1", max_retries=0)
    try:
        assert [m.id async for m in client.models.list()] == ["beta"]
        try:
            await client.models.retrieve("alpha")
        except openai.NotFoundError as exc:
            assert exc.code == "model_not_found"
        else:
            raise AssertionError("alpha should not be visible")
    finally:
        await client.close()


# ---- the answer's `model` is the public name ----------------------------------------------------------


def _named_registry(fake: Any) -> dict[str, Any]:
    registry = _registry(fake, [{"name": "free", "key": "free-key-123"}])
    registry["endpoints"].append({"name": "ep-same", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "alpha"})
    registry["models"] = [{"name": "alpha", "endpoints": ["ep"]},
                          {"name": "beta", "endpoints": ["ep"], "expose_upstream_model": True},
                          {"name": "same", "endpoints": ["ep-same"]},
                          {"name": "emb", "kind": "embedding", "endpoints": ["ep-emb"]}]
    registry["scenes"] = []
    return registry


async def _post(http: Any, server: Any, path: str, body: dict[str, Any]) -> Any:
    r = await http.post(server.base_url + path, json=body, headers={"Authorization": "Bearer free-key-123"})
    assert r.status_code == 200, r.text
    return r


async def test_answers_show_the_public_model_name_and_the_upstream_one_in_a_header(fake, hearth_server, http):
    server = hearth_server(_named_registry(fake))
    messages = [{"role": "user", "content": 'say "model": "up" please'}]
    r = await _post(http, server, "/v1/chat/completions", {"model": "alpha", "messages": messages})
    assert fake.stats.last_body["model"] == "up"
    assert r.json()["model"] == "alpha" and r.headers["x-hearth-upstream-model"] == "up"
    assert r.json()["choices"][0]["message"]["content"]  # the rest of the answer is intact
    r = await _post(http, server, "/v1/embeddings", {"model": "emb", "input": ["a", "b"]})
    assert r.json()["model"] == "emb" and r.headers["x-hearth-upstream-model"] == "up-emb"
    assert len(r.json()["data"]) == 2


async def test_a_model_may_expose_its_upstream_name(fake, hearth_server, http):
    server = hearth_server(_named_registry(fake))
    one = [{"role": "user", "content": "x"}]
    r = await _post(http, server, "/v1/chat/completions", {"model": "beta", "messages": one})
    assert r.json()["model"] == "up" and r.headers["x-hearth-upstream-model"] == "up"
    r = await _post(http, server, "/v1/chat/completions", {"model": "same", "messages": one})
    assert r.json()["model"] == "same" and r.headers["x-hearth-upstream-model"] == "alpha"


def test_the_model_field_is_rewritten_in_any_json_layout() -> None:
    import orjson

    from hearth.wire.model_name import public_model_body

    spaced = b'{"id": "x",\n  "model" :  "up-\\"q\\"", "choices": [{"text": "\\"model\\": \\"up\\""}]}'
    assert orjson.loads(public_model_body(spaced, "pub")) == {
        "id": "x", "model": "pub", "choices": [{"text": '"model": "up"'}]}
    nested = b'{"model":"up","meta":{"model":"inner"}}'  # twice: parsed, only the top level is changed
    assert orjson.loads(public_model_body(nested, "pub")) == {"model": "pub", "meta": {"model": "inner"}}
    assert public_model_body(b'{"id":"x"}', "pub") == b'{"id":"x"}'
    assert orjson.loads(public_model_body(b'{"model":null}', "pub")) == {"model": "pub"}


async def test_a_stream_carries_the_upstream_model_header(fake, hearth_server, http):
    server = hearth_server(_named_registry(fake))
    body = {"model": "alpha", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=body,
                           headers={"Authorization": "Bearer free-key-123"}) as r:
        assert r.status_code == 200
        assert r.headers["x-hearth-model"] == "alpha" and r.headers["x-hearth-upstream-model"] == "up"
        await r.aread()
