"""A signed call's nonce is claimed in the same atomic step that admits it (limits, budgets)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hearth.auth.signing import signed_headers
from tests.support import AUTH, gateway_registry

KEY = "admission-signing-key-0123456789"
PATH = "/v1/chat/completions"


def _registry(fake: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up"}])
    reg["callers"] = [{"name": "tester", "key": "test-key-123", "signing_key": KEY, "require_signature": True,
                       "limits": {"caller": {"rpm": 2}}}]
    return reg


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_replay_is_refused_at_admission_and_takes_no_rpm(backend, fake, hearth_server, http, request):
    settings: dict[str, Any] = {}
    if backend == "redis":
        settings = {"state_backend": "redis", "redis_prefix": request.getfixturevalue("redis_prefix")}
    server = hearth_server(_registry(fake), **settings)
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    headers = {**AUTH, "Content-Type": "application/json", **signed_headers(KEY, "POST", server.base_url + PATH, body)}
    first = await http.post(server.base_url + PATH, content=body, headers=headers)
    assert first.status_code == 200  # rpm 1/2
    for _ in range(3):
        replay = await http.post(server.base_url + PATH, content=body, headers=headers)
        assert replay.status_code == 401 and replay.json()["error"]["code"] == "nonce_replayed"
    fresh = {**AUTH, "Content-Type": "application/json", **signed_headers(KEY, "POST", server.base_url + PATH, body)}
    assert (await http.post(server.base_url + PATH, content=body, headers=fresh)).status_code == 200  # rpm 2/2
    assert fake.stats.requests == 2
