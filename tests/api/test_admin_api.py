"""Admin API: auth, listing with masked keys, idempotent upserts, validation, enable/disable."""

from __future__ import annotations

from typing import Any

from tests.support import ADMIN, AUTH, chat_body, gateway_registry


def _registry(fake: Any) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up", "api_key": "sk-admin-test-key-1234"}])


async def test_admin_requires_the_admin_token(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.get(server.base_url + "/api/v1/admin/endpoints")
    assert r.status_code == 401
    body = r.json()
    assert body["success"] is False and body["error"]["code"] == "admin_token_required"
    assert body["error"]["request_id"] == r.headers["x-request-id"]
    r = await http.get(server.base_url + "/api/v1/admin/endpoints", headers=AUTH)  # a caller key is not admin
    assert r.status_code == 401


async def test_admin_is_off_without_a_configured_token(fake, hearth_server, http):
    server = hearth_server(_registry(fake), admin_token=None)
    r = await http.get(server.base_url + "/api/v1/admin/endpoints", headers=ADMIN)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


async def test_endpoint_listing_masks_keys(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    data = (await http.get(server.base_url + "/api/v1/admin/endpoints", headers=ADMIN)).json()["data"]
    assert data[0]["api_key_hint"] == "sk-****1234"
    assert "api_key_enc" not in data[0] and "sk-admin-test-key-1234" not in str(data)


async def test_upsert_new_endpoint_and_model_then_route_to_it(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.put(server.base_url + "/api/v1/admin/endpoints/b", headers=ADMIN,
                       json={"provider": "openai-like", "base_url": fake2.base_url, "upstream_model": "up2"})
    assert r.status_code == 200 and r.json()["data"]["created"] == ["endpoint:b"]
    r = await http.put(server.base_url + "/api/v1/admin/models/m2", headers=ADMIN, json={"endpoints": ["b"]})
    assert r.status_code == 200
    again = await http.put(server.base_url + "/api/v1/admin/models/m2", headers=ADMIN, json={"endpoints": ["b"]})
    assert again.json()["data"] == {"created": [], "updated": [], "unchanged": 1}
    reply = await http.post(server.base_url + "/v1/chat/completions", headers=AUTH,
                            json={**chat_body(), "model": "m2"})
    assert reply.status_code == 200 and fake2.stats.last_body["model"] == "up2"


async def test_upsert_with_invalid_fields_is_refused_and_writes_nothing(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.put(server.base_url + "/api/v1/admin/endpoints/bad", headers=ADMIN,
                       json={"provider": "openai-like", "upstream_model": "x", "max_concurrency": -1,
                             "base_url": "ftp://nope"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    locs = [e["loc"] for e in r.json()["error"]["details"]["errors"]]
    assert ["max_concurrency"] in locs and ["base_url"] in locs
    r = await http.put(server.base_url + "/api/v1/admin/endpoints/orphan", headers=ADMIN,
                       json={"provider": "no-such-provider", "upstream_model": "x"})
    assert r.status_code == 400 and r.json()["error"]["details"]["unknown"] == "provider"
    names = [e["name"] for e in (await http.get(server.base_url + "/api/v1/admin/endpoints",
                                                headers=ADMIN)).json()["data"]]
    assert names == ["a"]


async def test_unknown_kind_is_404_with_the_valid_kinds(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.get(server.base_url + "/api/v1/admin/widgets", headers=ADMIN)
    assert r.status_code == 404 and "endpoints" in r.json()["error"]["details"]["kinds"]


async def test_disable_takes_the_endpoint_out_of_rotation_at_once(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.post(server.base_url + "/api/v1/admin/endpoints/a/disable", headers=ADMIN)
    assert r.status_code == 200
    reply = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert reply.status_code == 503 and reply.json()["error"]["code"] == "no_healthy_endpoint"
    assert fake.stats.requests == 0
    ready = await http.get(server.base_url + "/readyz")
    assert ready.status_code == 503
    await http.post(server.base_url + "/api/v1/admin/endpoints/a/enable", headers=ADMIN)
    assert (await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                            headers=AUTH)).status_code == 200
    missing = await http.post(server.base_url + "/api/v1/admin/endpoints/zzz/enable", headers=ADMIN)
    assert missing.status_code == 404


async def test_changes_made_by_another_process_are_picked_up(fake, hearth_server, http, tmp_path):
    # Two servers on one SQLite file would be refused with the memory backend, so the second writer
    # here is `apply_registry` itself, as `hearth apply` would run it.
    from hearth.registry.config import RegistrySpec
    from hearth.registry.key_vault import KeyVault
    from hearth.registry.store import apply_registry
    from tests.support import MASTER_KEY

    server = hearth_server(_registry(fake))
    rt = server.runtime
    spec = RegistrySpec.model_validate({"endpoints": [{"name": "a", "provider": "openai-like",
                                                       "base_url": fake.base_url, "upstream_model": "changed"}]})
    server.call(apply_registry(rt.engine, spec, KeyVault(bytes.fromhex(MASTER_KEY))))
    import asyncio

    for _ in range(40):
        await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
        if fake.stats.last_body["model"] == "changed":
            break
        await asyncio.sleep(0.1)
    assert fake.stats.last_body["model"] == "changed"


async def test_listing_never_shows_an_endpoint_of_a_disabled_provider_as_enabled(fake, hearth_server, http):
    registry = _registry(fake)
    registry["providers"].append({"name": "off", "kind": "openai", "enabled": False})
    registry["endpoints"].append({"name": "z", "provider": "off", "base_url": fake.base_url, "upstream_model": "up"})
    registry["models"][0]["endpoints"].append("z")
    server = hearth_server(registry)
    rows = {r["name"]: r for r in (await http.get(server.base_url + "/api/v1/admin/endpoints",
                                                  headers=ADMIN)).json()["data"]}
    assert (rows["z"]["enabled"], rows["z"]["disabled_by"], rows["z"]["disabled_reason"]) == (
        False, "provider", "provider 'off' disabled")
    assert (rows["a"]["enabled"], rows["a"]["disabled_by"], rows["a"]["disabled_reason"]) == (True, None, None)
    status = (await http.get(server.base_url + "/api/v1/admin/endpoints/z/status", headers=ADMIN)).json()["data"]
    assert (status["enabled"], status["disabled_by"], status["disabled_reason"]) == (
        False, "provider", "provider 'off' disabled")


async def test_an_admin_disable_is_recorded_and_survives_an_upsert_until_enabled(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    url = server.base_url + "/api/v1/admin/endpoints"
    r = await http.post(url + "/a/disable", headers=ADMIN)
    assert r.status_code == 200 and r.json()["data"] == {"name": "a", "enabled": False,
                                                         "disabled_reason": "disabled by admin", "disabled_by": "admin"}
    row = next(e for e in (await http.get(url, headers=ADMIN)).json()["data"] if e["name"] == "a")
    assert (row["enabled"], row["disabled_by"], row["disabled_reason"]) == (False, "admin", "disabled by admin")
    assert row["disabled_at"]
    # re-sending the entry (same key) is not an enable: it is kept disabled and says so
    upsert = await http.put(url + "/a", headers=ADMIN, json={"provider": "openai-like", "base_url": fake.base_url,
                                                             "upstream_model": "up", "enabled": True,
                                                             "api_key": "sk-admin-test-key-1234"})
    assert upsert.status_code == 200, upsert.text
    assert upsert.json()["data"]["kept_disabled"] == [
        {"name": "endpoint:a", "reason": "disabled by admin", "disabled_by": "admin"}]
    reply = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert reply.status_code == 503 and fake.stats.requests == 0
    r = await http.post(url + "/a/enable", headers=ADMIN)
    assert r.json()["data"] == {"name": "a", "enabled": True, "disabled_reason": None, "disabled_by": None}
    row = next(e for e in (await http.get(url, headers=ADMIN)).json()["data"] if e["name"] == "a")
    assert (row["enabled"], row["disabled_by"], row["disabled_reason"], row["disabled_at"]) == (
        True, None, None, None)
