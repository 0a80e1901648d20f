"""Admin API for callers: keys shown once, listed by prefix, rotated and revoked at once; policy updates."""

from __future__ import annotations

from typing import Any

from tests.support import ADMIN, AUTH, chat_body, gateway_registry

CALLERS = "/api/v1/admin/callers"


def _registry(fake: Any) -> dict[str, Any]:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up", "api_key": "sk-callers-test-key-1234"}])
    registry["endpoints"].append({"name": "b", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up-b", "api_key": "sk-callers-test-key-5678"})
    registry["models"].append({"name": "other", "endpoints": ["b"]})
    registry["scenes"] = [{"name": "chat", "default_model": "m"}]
    return registry


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_create_list_rotate_revoke(fake, hearth_server, http, database_url):
    server = hearth_server(_registry(fake), database_url=database_url)
    base = server.base_url
    r = await http.post(base + CALLERS, headers=ADMIN,
                        json={"name": "billing", "allowed_models": ["m"], "default_scene": "chat"})
    assert r.status_code == 201, r.text
    created = r.json()["data"]
    key = created["key"]
    assert created["name"] == "billing" and key.startswith(created["key_prefix"]) and len(key) > 30
    assert (await http.get(base + "/v1/models", headers=_bearer(key))).status_code == 200

    listing = await http.get(base + CALLERS, headers=ADMIN)
    assert listing.status_code == 200
    rows = {c["name"]: c for c in listing.json()["data"]}
    assert set(rows) == {"tester", "billing"}
    assert rows["billing"]["key_prefix"] == created["key_prefix"]
    assert rows["billing"]["allowed_models"] == ["m"] and rows["billing"]["default_scene"] == "chat"
    assert key not in listing.text and "key_hash" not in listing.text and "signing_key_enc" not in listing.text
    one = await http.get(base + CALLERS + "/billing", headers=ADMIN)
    assert one.status_code == 200 and one.json()["data"]["key_prefix"] == created["key_prefix"]
    assert key not in one.text

    rotated = await http.post(base + CALLERS + "/billing/rotate", headers=ADMIN)
    assert rotated.status_code == 200
    new_key = rotated.json()["data"]["key"]
    assert new_key != key and new_key.startswith(rotated.json()["data"]["key_prefix"])
    old = await http.get(base + "/v1/models", headers=_bearer(key))
    assert old.status_code == 401 and old.json()["error"]["code"] == "invalid_api_key"
    assert (await http.get(base + "/v1/models", headers=_bearer(new_key))).status_code == 200

    revoked = await http.post(base + CALLERS + "/billing/revoke", headers=ADMIN)
    assert revoked.status_code == 200 and revoked.json()["data"]["revoked"] is True
    assert revoked.json()["data"]["key_prefix"] is None
    gone = await http.get(base + "/v1/models", headers=_bearer(new_key))
    assert gone.status_code == 401 and gone.json()["error"]["code"] == "invalid_api_key"
    # a revoked caller comes back only through rotate, with yet another key
    back = (await http.post(base + CALLERS + "/billing/rotate", headers=ADMIN)).json()["data"]["key"]
    assert (await http.get(base + "/v1/models", headers=_bearer(back))).status_code == 200
    assert (await http.get(base + "/v1/models", headers=_bearer(new_key))).status_code == 401
    assert (await http.get(base + "/v1/models", headers=AUTH)).status_code == 200  # other callers untouched


async def test_duplicate_create_is_a_conflict_and_keeps_the_first_key(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    first = await http.post(server.base_url + CALLERS, headers=ADMIN, json={"name": "dup"})
    again = await http.post(server.base_url + CALLERS, headers=ADMIN, json={"name": "dup"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    key = first.json()["data"]["key"]
    assert (await http.get(server.base_url + "/v1/models", headers=_bearer(key))).status_code == 200
    taken = await http.post(server.base_url + CALLERS, headers=ADMIN, json={"name": "tester"})
    assert taken.status_code == 409
    assert (await http.get(server.base_url + "/v1/models", headers=AUTH)).status_code == 200


async def test_put_changes_policy_at_once_and_is_idempotent(fake, hearth_server, http, database_url):
    server = hearth_server(_registry(fake), database_url=database_url)
    base = server.base_url
    key = (await http.post(base + CALLERS, headers=ADMIN, json={"name": "app"})).json()["data"]["key"]
    other = {**chat_body(), "model": "other"}
    assert (await http.post(base + "/v1/chat/completions", headers=_bearer(key), json=other)).status_code == 200

    r = await http.put(base + CALLERS + "/app", headers=ADMIN, json={"allowed_models": ["m"]})
    assert r.status_code == 200 and r.json()["data"]["updated"] == ["caller:app"]
    denied = await http.post(base + "/v1/chat/completions", headers=_bearer(key), json=other)
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "model_not_allowed"
    assert (await http.post(base + "/v1/chat/completions", headers=_bearer(key), json=chat_body())).status_code == 200

    again = await http.put(base + CALLERS + "/app", headers=ADMIN, json={"allowed_models": ["m"]})
    assert again.json()["data"] == {"created": [], "updated": [], "unchanged": 1}
    # the key survived both updates
    assert (await http.get(base + "/v1/models", headers=_bearer(key))).status_code == 200

    r = await http.put(base + CALLERS + "/app", headers=ADMIN, json={"enabled": False})
    assert r.status_code == 200
    off = await http.get(base + "/v1/models", headers=_bearer(key))
    assert off.status_code == 403 and off.json()["error"]["code"] == "caller_disabled"


async def test_bad_input_is_refused_with_details_and_writes_nothing(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    base = server.base_url

    async def names() -> list[str]:
        return sorted(c["name"] for c in (await http.get(base + CALLERS, headers=ADMIN)).json()["data"])

    r = await http.post(base + CALLERS, headers=ADMIN,
                        json={"name": "bad name!", "limits": {"user": {"rpm": -1}}, "colour": "red"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    locs = [e["loc"] for e in r.json()["error"]["details"]["errors"]]
    assert ["name"] in locs and ["limits", "user", "rpm"] in locs and ["colour"] in locs

    r = await http.post(base + CALLERS, headers=ADMIN, json={"name": "keyed", "key": "chosen-by-me-123"})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["loc"] == ["key"]

    r = await http.post(base + CALLERS, headers=ADMIN, json={"name": "lost", "default_scene": "nope"})
    assert r.status_code == 400 and r.json()["error"]["details"] == {"unknown": "scene", "name": "nope"}

    r = await http.post(base + CALLERS, headers=ADMIN, content=b"[1, 2]")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert await names() == ["tester"]

    r = await http.put(base + CALLERS + "/tester", headers=ADMIN, json={"key": "new-key-chosen-123"})
    assert r.status_code == 400
    r = await http.put(base + CALLERS + "/tester", headers=ADMIN, json={"allowed_models": "m"})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["loc"] == ["allowed_models"]
    r = await http.put(base + CALLERS + "/tester", headers=ADMIN, json={"name": "someone-else"})
    assert r.status_code == 400
    r = await http.put(base + CALLERS + "/tester", headers=ADMIN, json={"default_scene": "nope"})
    assert r.status_code == 400 and r.json()["error"]["details"]["unknown"] == "scene"
    tester = (await http.get(base + CALLERS + "/tester", headers=ADMIN)).json()["data"]
    assert tester["allowed_models"] is None and tester["default_scene"] is None
    assert (await http.get(base + "/v1/models", headers=AUTH)).status_code == 200


async def test_unknown_caller_is_404(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    base = server.base_url
    for method, path in (("GET", "/ghost"), ("POST", "/ghost/rotate"), ("POST", "/ghost/revoke")):
        r = await http.request(method, base + CALLERS + path, headers=ADMIN)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (method, path)
    r = await http.put(base + CALLERS + "/ghost", headers=ADMIN, json={"enabled": True})
    assert r.status_code == 404
    assert [c["name"] for c in (await http.get(base + CALLERS, headers=ADMIN)).json()["data"]] == ["tester"]


async def test_the_admin_token_is_required(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    base = server.base_url
    attempts = [("GET", "", None), ("POST", "", {"name": "sneaky"}), ("GET", "/tester", None),
                ("PUT", "/tester", {"enabled": False}), ("POST", "/tester/rotate", None),
                ("POST", "/tester/revoke", None)]
    for method, path, body in attempts:
        for headers in ({}, AUTH):  # no token, and a caller key (which is not an admin token)
            r = await http.request(method, base + CALLERS + path, headers=headers, json=body)
            assert r.status_code == 401 and r.json()["error"]["code"] == "admin_token_required", (method, path)
    assert (await http.get(base + "/v1/models", headers=AUTH)).status_code == 200
    names = [c["name"] for c in (await http.get(base + CALLERS, headers=ADMIN)).json()["data"]]
    assert names == ["tester"]


async def test_scenes_and_budgets_are_generic_admin_kinds(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    base = server.base_url + "/api/v1/admin"
    r = await http.put(base + "/scenes/summary", headers=ADMIN, json={"default_model": "m", "max_tokens_cap": 256})
    assert r.status_code == 200 and r.json()["data"]["created"] == ["scene:summary"]
    scenes = {s["name"]: s for s in (await http.get(base + "/scenes", headers=ADMIN)).json()["data"]}
    assert scenes["summary"]["max_tokens_cap"] == 256 and scenes["summary"]["allowed_models"] == ["m"]
    r = await http.put(base + "/scenes/broken", headers=ADMIN, json={"default_model": "no-such-model"})
    assert r.status_code == 400 and r.json()["error"]["details"]["unknown"] == "model"

    r = await http.put(base + "/budgets/daily", headers=ADMIN,
                       json={"caller": "tester", "unit": "tokens", "period": "day", "limit": 1000})
    assert r.status_code == 200 and r.json()["data"]["created"] == ["budget:daily"]
    budgets = (await http.get(base + "/budgets", headers=ADMIN)).json()["data"]
    assert [(b["name"], b["caller"], b["limit_amount"]) for b in budgets] == [("daily", "tester", 1000)]
    r = await http.put(base + "/budgets/bad", headers=ADMIN, json={"limit": -1})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["loc"] == ["limit"]


async def test_names_with_dots_and_colons_work_on_every_route_and_slashes_are_refused(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    base = server.base_url + CALLERS
    created = await http.post(base, headers=ADMIN, json={"name": "team.app:v2"})
    assert created.status_code == 201
    assert (await http.get(base + "/team.app:v2", headers=ADMIN)).json()["data"]["name"] == "team.app:v2"
    r = await http.put(base + "/team.app:v2", headers=ADMIN, json={"allowed_models": ["m"]})
    assert r.json()["data"]["updated"] == ["caller:team.app:v2"]
    key = (await http.post(base + "/team.app:v2/rotate", headers=ADMIN)).json()["data"]["key"]
    assert (await http.get(server.base_url + "/v1/models", headers=_bearer(key))).status_code == 200
    assert (await http.post(base + "/team.app:v2/revoke", headers=ADMIN)).status_code == 200
    assert (await http.get(server.base_url + "/v1/models", headers=_bearer(key))).status_code == 401
    # registry names carry no '/' (docs/operations.md, "Request limits"): refused in bodies and in paths
    r = await http.post(base, headers=ADMIN, json={"name": "team/app"})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["loc"] == ["name"]
    for method, path in (("GET", "/team/app"), ("PUT", "/team/app"), ("POST", "/team/app/rotate"),
                         ("POST", "/team/app/revoke")):
        r = await http.request(method, base + path, headers=ADMIN, json={} if method == "PUT" else None)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (method, path, r.text)
