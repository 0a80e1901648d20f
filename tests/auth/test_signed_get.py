"""Signatures on every caller route, GET included (issue 7, item 10), through a real Hearth server.

``GET /v1/models`` (served by the hot path) and ``GET /v1/models/{id}`` (served by FastAPI) have no
body and no admission step, so the signature is verified over the empty body and the nonce is claimed
right there, once. A forged or refused request consumes no nonce; on Redis a nonce is shared between
processes; the state backend being down fails closed.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from hearth.auth.signing import signed_headers
from tests.support import AUTH, gateway_registry, load_signing_vectors

SIGNING_KEY = "get-signing-key-0123456789abcdef"
GLOBAL_KEY = "get-global-signing-key-0123456789"
ROUTES = ["/v1/models", "/v1/models/m"]


def _registry(**caller: Any) -> dict[str, Any]:
    registry = gateway_registry([{"name": "a", "provider": "sim", "upstream_model": "sim-1"}])
    registry["callers"] = [{"name": "tester", "key": "test-key-123", **caller}]
    return registry


def _signing_registry() -> dict[str, Any]:
    return _registry(signing_key=SIGNING_KEY, require_signature=True)


def _settings(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "redis":
        return {"state_backend": "redis", "redis_prefix": request.getfixturevalue("redis_prefix")}
    return {}


def _signed(url: str, key: str = SIGNING_KEY, **kwargs: Any) -> dict[str, str]:
    return {**AUTH, **signed_headers(key, "GET", url, b"", **kwargs)}


def _code(response: Any) -> str:
    code: str = response.json()["error"]["code"]
    return code


def _ok(response: Any, route: str) -> None:
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["data"][0]["id"] if route == "/v1/models" else body["id"]) == "m"


@pytest.mark.parametrize("backend", ["memory", "redis"])
@pytest.mark.parametrize("route", ROUTES)
async def test_a_signed_get_passes_once_and_its_replay_is_refused(hearth_server, http, request, backend, route):
    server = hearth_server(_signing_registry(), **_settings(backend, request))
    url = server.base_url + route
    headers = _signed(url)
    _ok(await http.get(url, headers=headers), route)
    for _ in range(2):
        replay = await http.get(url, headers=headers)
        assert replay.status_code == 401 and _code(replay) == "nonce_replayed", replay.text
        assert replay.json()["error"]["type"] == "authentication_error"
    _ok(await http.get(url, headers=_signed(url)), route)  # a fresh nonce passes


@pytest.mark.parametrize("route", ROUTES)
async def test_an_unsigned_or_badly_signed_get_is_refused(hearth_server, http, route):
    server = hearth_server(_signing_registry(), signature_window_s=30)
    url = server.base_url + route
    r = await http.get(url, headers=AUTH)
    assert r.status_code == 401 and _code(r) == "signature_required", r.text
    r = await http.get(url, headers=_signed(url, key="some-other-key-0123456789"))
    assert r.status_code == 401 and _code(r) == "signature_invalid", r.text
    signed_for_post = {**AUTH, **signed_headers(SIGNING_KEY, "POST", url, b"")}
    r = await http.get(url, headers=signed_for_post)
    assert r.status_code == 401 and _code(r) == "signature_invalid", r.text
    other_route = ROUTES[1] if route == ROUTES[0] else ROUTES[0]
    r = await http.get(url, headers=_signed(server.base_url + other_route))
    assert r.status_code == 401 and _code(r) == "signature_invalid", r.text
    r = await http.get(url, headers=_signed(url, timestamp=int(time.time()) - 120))
    assert r.status_code == 401 and _code(r) == "timestamp_out_of_window", r.text


@pytest.mark.parametrize("route", ROUTES)
async def test_a_forged_get_does_not_burn_the_genuine_nonce(hearth_server, http, route):
    server = hearth_server(_signing_registry())
    url = server.base_url + route
    genuine = _signed(url)
    forged = {**genuine, "X-Signature": "0" * 64}
    for _ in range(3):
        r = await http.get(url, headers=forged)
        assert r.status_code == 401 and _code(r) == "signature_invalid", r.text
    r = await http.get(url + "?x=1", headers=genuine)  # tampered target
    assert r.status_code == 401 and _code(r) == "signature_invalid", r.text
    _ok(await http.get(url, headers=genuine), route)


async def test_get_and_post_share_one_nonce_space(hearth_server, http):
    server = hearth_server(_signing_registry())
    url = server.base_url + "/v1/models"
    headers = _signed(url, nonce="shared-nonce-get-post-1")
    _ok(await http.get(url, headers=headers), "/v1/models")
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    chat = server.base_url + "/v1/chat/completions"
    post = {**AUTH, "Content-Type": "application/json",
            **signed_headers(SIGNING_KEY, "POST", chat, body, nonce="shared-nonce-get-post-1")}
    r = await http.post(chat, content=body, headers=post)
    assert r.status_code == 401 and _code(r) == "nonce_replayed", r.text


async def test_global_signing_mode_covers_gets(hearth_server, http):
    server = hearth_server(_registry(), require_signatures=True, signature_key=GLOBAL_KEY)
    url = server.base_url + "/v1/models"
    r = await http.get(url, headers=AUTH)
    assert r.status_code == 401 and _code(r) == "signature_required", r.text
    _ok(await http.get(url, headers=_signed(url, key=GLOBAL_KEY)), "/v1/models")


async def test_a_caller_that_need_not_sign_gets_unsigned(hearth_server, http):
    server = hearth_server(_registry(signing_key=SIGNING_KEY))
    for route in ROUTES:
        _ok(await http.get(server.base_url + route, headers=AUTH), route)


async def test_the_api_key_is_checked_before_the_signature_on_get(hearth_server, http):
    server = hearth_server(_signing_registry())
    url = server.base_url + "/v1/models"
    headers = _signed(url)
    r = await http.get(url, headers={**headers, "Authorization": "Bearer not-a-key-999"})
    assert r.status_code == 401 and _code(r) == "invalid_api_key", r.text
    _ok(await http.get(url, headers=headers), "/v1/models")  # the nonce is still fresh


async def test_a_signed_get_fails_closed_when_redis_is_down(hearth_server, http):
    server = hearth_server(_signing_registry(), state_backend="redis", redis_url="redis://127.0.0.1:9/0")
    url = server.base_url + "/v1/models"
    r = await http.get(url, headers=_signed(url))
    assert r.status_code == 503 and _code(r) == "state_backend_unavailable", r.text
    assert "retry-after" in r.headers


async def test_a_nonce_claimed_on_one_server_is_refused_on_another(hearth_server, http, redis_prefix, tmp_path):
    shared = {"state_backend": "redis", "redis_prefix": redis_prefix}
    one = hearth_server(_signing_registry(), database_url=f"sqlite+aiosqlite:///{tmp_path}/a.db", **shared)
    two = hearth_server(_signing_registry(), database_url=f"sqlite+aiosqlite:///{tmp_path}/b.db", **shared)
    headers = {**AUTH, **signed_headers(SIGNING_KEY, "GET", "/v1/models", b"")}  # path only: valid for both
    _ok(await http.get(one.base_url + "/v1/models", headers=headers), "/v1/models")
    r = await http.get(two.base_url + "/v1/models", headers=headers)
    assert r.status_code == 401 and _code(r) == "nonce_replayed", r.text


def test_documented_vector_1_is_a_signed_get_on_models() -> None:
    vector = load_signing_vectors()[0]
    assert (vector["method"], vector["path_with_query"], vector["body_hex"]) == ("GET", "/v1/models", "")


@pytest.mark.parametrize("route", ["/api/v1/budgets", "/api/v1/usage"])
async def test_a_signing_caller_reads_its_budgets_and_usage_only_signed(hearth_server, http, route):
    server = hearth_server(_signing_registry())
    url = server.base_url + route
    unsigned = await http.get(url, headers=AUTH)
    assert unsigned.status_code == 401 and _code(unsigned) == "signature_required"
    signed = await http.get(url, headers=_signed(url))
    assert signed.status_code == 200, signed.text
