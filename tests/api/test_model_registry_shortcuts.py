"""Seed 000's registry shortcuts: a provider and a model by code, idempotent, usable at once."""

from __future__ import annotations

from tests.support import ADMIN, AUTH, chat_body


async def test_a_provider_and_a_model_posted_by_code_serve_calls_and_posting_again_changes_nothing(
        fake, hearth_server, http):
    server = hearth_server({"callers": [{"name": "tester", "key": "test-key-123"}]})
    provider = {"provider_code": "acme", "kind": "openai", "base_url": fake.base_url}
    model = {"provider_code": "acme", "model_name": "acme-chat", "upstream_model": "up-1",
             "api_key": "sk-acme-0123456789"}
    first = await http.post(server.base_url + "/api/v1/model/providers", headers=ADMIN, json=provider)
    assert first.status_code == 200, first.text
    made = await http.post(server.base_url + "/api/v1/models", headers=ADMIN, json=model)
    assert made.status_code == 200, made.text
    r = await http.post(server.base_url + "/v1/chat/completions", headers=AUTH, json=chat_body(model="acme-chat"))
    assert r.status_code == 200, r.text
    assert fake.stats.last_body["model"] == "up-1"
    assert fake.stats.last_headers["Authorization"] == "Bearer sk-acme-0123456789"
    again = await http.post(server.base_url + "/api/v1/models", headers=ADMIN, json=model)
    assert again.json()["data"]["created"] == [] and again.json()["data"]["updated"] == []
    assert "sk-acme" not in again.text and "sk-acme" not in made.text


async def test_a_model_of_an_unknown_provider_is_refused(fake, hearth_server, http):
    server = hearth_server({"callers": [{"name": "tester", "key": "test-key-123"}]})
    r = await http.post(server.base_url + "/api/v1/models", headers=ADMIN,
                        json={"provider_code": "nope", "model_name": "x", "api_key": "sk-x-0123456789"})
    assert 400 <= r.status_code < 500
    bad = await http.post(server.base_url + "/api/v1/model/providers", headers=ADMIN,
                          json={"provider_code": "a b", "kind": "openai"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
