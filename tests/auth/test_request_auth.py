"""Internal auth end to end through a real Hearth server: signatures, nonces, the shared token.

Every signed request is signed with the package's own helper over the exact bytes that go on the
wire (``content=``, never ``json=``), so these tests also prove the helper and the server agree.
Each refusal checks the OpenAI error shape and that nothing reached the upstream.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import redis

from hearth.auth.signing import signed_headers
from hearth.testing.fake_upstream import FakeUpstream
from tests.support import AUTH, REDIS_URL, SIGNING_KEY, chat_body, gateway_registry

GLOBAL_KEY = "global-signing-key-abcdefghij"
INTERNAL_TOKEN = "internal-shared-token-xyz-42"
PATH = "/v1/chat/completions"


def _registry(fake: FakeUpstream, **caller: Any) -> dict[str, Any]:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up", "api_key": "sk-upstream-key-abcdef"}])
    registry["callers"] = [{"name": "tester", "key": "test-key-123", **caller}]
    return registry


def _signing_registry(fake: FakeUpstream) -> dict[str, Any]:
    return _registry(fake, signing_key=SIGNING_KEY, require_signature=True)


def _raw(content: str = "hello") -> bytes:
    return orjson.dumps(chat_body(content))


async def _post(http: Any, server: Any, body: bytes, headers: dict[str, str], path: str = PATH) -> Any:
    return await http.post(server.base_url + path, content=body,
                           headers={"Content-Type": "application/json", **headers})


async def _signed_post(http: Any, server: Any, body: bytes, key: str = SIGNING_KEY, path: str = PATH,
                       **sign_kwargs: Any) -> Any:
    headers = {**AUTH, **signed_headers(key, "POST", server.base_url + path, body, **sign_kwargs)}
    return await _post(http, server, body, headers, path)


def _refused(response: Any, status: int, code: str) -> dict[str, Any]:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    assert response.status_code == status, response.text
    payload = response.json()
    assert set(payload) == {"error"}, payload
    error: dict[str, Any] = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == ("authentication_error" if status == 401 else "permission_error")
    return error


# ---- per-caller signatures -------------------------------------------------------------------------


async def test_a_correctly_signed_request_passes(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    r = await _signed_post(http, server, _raw())
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["role"] == "assistant"
    assert fake.stats.requests == 1


async def test_the_signature_covers_the_query_when_one_is_sent(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    r = await _signed_post(http, server, _raw(), path=PATH + "?trace=abc")
    assert r.status_code == 200, r.text


async def test_a_replayed_request_is_refused(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    body = _raw()
    headers = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body)}
    assert (await _post(http, server, body, headers)).status_code == 200
    _refused(await _post(http, server, body, headers), 401, "nonce_replayed")
    assert fake.stats.requests == 1
    # the same nonce stays burnt even under a fresh timestamp and a fresh valid signature
    again = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body,
                                      nonce=headers["X-Nonce"], timestamp=int(time.time()) + 1)}
    _refused(await _post(http, server, body, again), 401, "nonce_replayed")
    assert fake.stats.requests == 1


async def test_a_tampered_body_is_refused(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    body = _raw("pay 10")
    headers = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body)}
    _refused(await _post(http, server, _raw("pay 10000"), headers), 401, "signature_invalid")
    # re-serialising the same JSON differently is a different body too: sign the bytes you send
    spaced = orjson.dumps(chat_body("pay 10"), option=orjson.OPT_INDENT_2)
    _refused(await _post(http, server, spaced, headers), 401, "signature_invalid")
    assert fake.stats.requests == 0


async def test_a_tampered_path_is_refused(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    body = _raw()
    # signed for another route, sent to the chat route
    headers = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + "/v1/embeddings", body)}
    _refused(await _post(http, server, body, headers), 401, "signature_invalid")
    # the same route reached through a different wire path (a percent-encoded letter)
    headers = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body)}
    _refused(await _post(http, server, body, headers, path="/v1/chat/completion%73"), 401, "signature_invalid")
    assert fake.stats.requests == 0


async def test_an_extra_slash_in_the_path_is_never_served(fake, hearth_server, http):
    # `/v1//chat/completions` is no route at all (404 before auth) or, if a router ever normalises it,
    # must fail the signature: either way it is refused and never reaches an upstream.
    server = hearth_server(_signing_registry(fake))
    body = _raw()
    headers = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body)}
    r = await _post(http, server, body, headers, path="/v1//chat/completions")
    assert r.status_code in (401, 404), r.text
    if r.status_code == 401:
        _refused(r, 401, "signature_invalid")
    assert fake.stats.requests == 0


async def test_a_tampered_query_is_refused(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    body = _raw()
    headers = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body)}
    _refused(await _post(http, server, body, headers, path=PATH + "?x=1"), 401, "signature_invalid")
    signed_with_query = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH + "?x=1", body)}
    _refused(await _post(http, server, body, signed_with_query, path=PATH + "?x=2"), 401, "signature_invalid")
    _refused(await _post(http, server, body, signed_with_query), 401, "signature_invalid")  # query dropped
    assert fake.stats.requests == 0


async def test_a_forged_request_does_not_burn_the_genuine_callers_nonce(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    body = _raw()
    genuine = {**AUTH, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body)}
    forged = {**genuine, "X-Signature": "0" * 64}
    _refused(await _post(http, server, body, forged), 401, "signature_invalid")
    _refused(await _post(http, server, _raw("tampered"), genuine), 401, "signature_invalid")
    assert (await _post(http, server, body, genuine)).status_code == 200


async def test_a_signature_made_with_another_key_is_refused(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    _refused(await _signed_post(http, server, _raw(), key="some-other-key-0123456789"), 401, "signature_invalid")
    assert fake.stats.requests == 0


async def test_a_timestamp_outside_the_window_is_refused(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake), signature_window_s=30)
    now = int(time.time())
    _refused(await _signed_post(http, server, _raw(), timestamp=now - 120), 401, "timestamp_out_of_window")
    _refused(await _signed_post(http, server, _raw(), timestamp=now + 120), 401, "timestamp_out_of_window")
    _refused(await _signed_post(http, server, _raw(), timestamp=now * 1000), 401, "timestamp_out_of_window")
    assert fake.stats.requests == 0
    # inside the window a little skew either way is fine
    assert (await _signed_post(http, server, _raw(), timestamp=now - 10)).status_code == 200
    assert (await _signed_post(http, server, _raw(), timestamp=now + 10)).status_code == 200


async def test_missing_signature_headers_are_refused(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    body = _raw()
    _refused(await _post(http, server, body, AUTH), 401, "signature_required")
    full = signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body)
    for missing in full:
        partial = {name: value for name, value in full.items() if name != missing}
        _refused(await _post(http, server, body, {**AUTH, **partial}), 401, "signature_required")
    _refused(await _post(http, server, body, {**AUTH, **full, "X-Signature": full["X-Signature"].upper()}),
             401, "signature_required")  # malformed: the signature is lowercase hex
    assert fake.stats.requests == 0
    assert (await _post(http, server, body, {**AUTH, **full})).status_code == 200  # none of that burnt the nonce


async def test_a_signing_header_sent_twice_is_refused_even_when_one_copy_is_right(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    body = _raw()
    full = signed_headers(SIGNING_KEY, "POST", server.base_url + PATH, body)
    for name in full:
        headers = [*AUTH.items(), *full.items(), (name, full[name])]  # the same value again
        r = await http.post(server.base_url + PATH, content=body,
                            headers=[*headers, ("content-type", "application/json")])
        assert name in _refused(r, 401, "signature_required")["message"]
    assert fake.stats.requests == 0
    assert (await _post(http, server, body, {**AUTH, **full})).status_code == 200  # the nonce was not burnt


async def test_a_caller_without_require_signature_passes_unsigned(fake, hearth_server, http):
    registry = _signing_registry(fake)
    registry["callers"].append({"name": "relaxed", "key": "relaxed-key-456", "signing_key": "relaxed-signing-key-1"})
    server = hearth_server(registry)
    r = await _post(http, server, _raw(), {"Authorization": "Bearer relaxed-key-456"})
    assert r.status_code == 200, r.text
    # the strict caller on the same server still must sign
    _refused(await _post(http, server, _raw(), AUTH), 401, "signature_required")


async def test_the_api_key_is_checked_before_the_signature(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake))
    body = _raw()
    headers = {"Authorization": "Bearer not-a-key-999", **signed_headers(SIGNING_KEY, "POST",
                                                                          server.base_url + PATH, body)}
    _refused(await _post(http, server, body, headers), 401, "invalid_api_key")
    assert (await _post(http, server, body, {**headers, **AUTH})).status_code == 200  # nonce still fresh


# ---- global signing mode ---------------------------------------------------------------------------


async def test_global_mode_requires_every_caller_to_sign_with_the_global_key(fake, hearth_server, http):
    server = hearth_server(_registry(fake), require_signatures=True, signature_key=GLOBAL_KEY)
    _refused(await _post(http, server, _raw(), AUTH), 401, "signature_required")
    _refused(await _signed_post(http, server, _raw(), key=SIGNING_KEY), 401, "signature_invalid")
    assert fake.stats.requests == 0
    r = await _signed_post(http, server, _raw(), key=GLOBAL_KEY)
    assert r.status_code == 200, r.text


async def test_global_mode_uses_a_callers_own_key_when_it_has_one(fake, hearth_server, http):
    server = hearth_server(_registry(fake, signing_key=SIGNING_KEY), require_signatures=True,
                           signature_key=GLOBAL_KEY)
    _refused(await _signed_post(http, server, _raw(), key=GLOBAL_KEY), 401, "signature_invalid")
    assert (await _signed_post(http, server, _raw(), key=SIGNING_KEY)).status_code == 200


async def test_required_signature_without_any_key_fails_closed(fake, hearth_server, http):
    server = hearth_server(_registry(fake, require_signature=True))  # no caller key, no global key
    _refused(await _signed_post(http, server, _raw(), key=GLOBAL_KEY), 401, "signature_required")
    assert fake.stats.requests == 0


# ---- shared-token mode -----------------------------------------------------------------------------


async def test_shared_token_authenticates_the_named_caller(fake, hearth_server, http):
    server = hearth_server(_registry(fake), internal_token=INTERNAL_TOKEN)
    r = await _post(http, server, _raw(), {"X-Internal-Token": INTERNAL_TOKEN, "X-Hearth-Caller": "tester"})
    assert r.status_code == 200, r.text
    assert fake.stats.requests == 1


async def test_shared_token_defaults_to_the_configured_caller(fake, hearth_server, http):
    server = hearth_server(_registry(fake), internal_token=INTERNAL_TOKEN, internal_token_caller="tester")
    r = await _post(http, server, _raw(), {"X-Internal-Token": INTERNAL_TOKEN})
    assert r.status_code == 200, r.text


async def test_a_wrong_internal_token_is_refused(fake, hearth_server, http):
    server = hearth_server(_registry(fake), internal_token=INTERNAL_TOKEN)
    for token in ("wrong-token", INTERNAL_TOKEN + "x", INTERNAL_TOKEN[:-1]):
        _refused(await _post(http, server, _raw(), {"X-Internal-Token": token, "X-Hearth-Caller": "tester"}),
                 401, "invalid_api_key")
    _refused(await _post(http, server, _raw(), {"X-Internal-Token": INTERNAL_TOKEN, "X-Hearth-Caller": "nobody"}),
             401, "invalid_api_key")
    assert fake.stats.requests == 0


async def test_the_internal_token_is_refused_when_shared_token_mode_is_off(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    _refused(await _post(http, server, _raw(), {"X-Internal-Token": INTERNAL_TOKEN, "X-Hearth-Caller": "tester"}),
             401, "invalid_api_key")
    _refused(await _post(http, server, _raw(), {}), 401, "invalid_api_key")
    assert fake.stats.requests == 0


async def test_shared_token_callers_still_sign_when_required(fake, hearth_server, http):
    server = hearth_server(_signing_registry(fake), internal_token=INTERNAL_TOKEN)
    token = {"X-Internal-Token": INTERNAL_TOKEN, "X-Hearth-Caller": "tester"}
    _refused(await _post(http, server, _raw(), token), 401, "signature_required")
    body = _raw()
    r = await _post(http, server, body, {**token, **signed_headers(SIGNING_KEY, "POST", server.base_url + PATH,
                                                                    body)})
    assert r.status_code == 200, r.text


# ---- disabled callers ------------------------------------------------------------------------------


async def test_a_disabled_caller_is_refused(fake, hearth_server, http):
    server = hearth_server(_registry(fake, enabled=False), internal_token=INTERNAL_TOKEN)
    _refused(await _post(http, server, _raw(), AUTH), 403, "caller_disabled")
    _refused(await _post(http, server, _raw(), {"X-Internal-Token": INTERNAL_TOKEN, "X-Hearth-Caller": "tester"}),
             403, "caller_disabled")
    assert fake.stats.requests == 0


# ---- nonces are shared through Redis ---------------------------------------------------------------


async def test_a_nonce_used_on_one_server_is_refused_on_another_sharing_redis(fake, hearth_server, http,
                                                                              redis_prefix, tmp_path):
    window_s = 60.0
    shared = {"state_backend": "redis", "redis_prefix": redis_prefix, "signature_window_s": window_s}
    one = hearth_server(_signing_registry(fake), database_url=f"sqlite+aiosqlite:///{tmp_path}/a.db", **shared)
    two = hearth_server(_signing_registry(fake), database_url=f"sqlite+aiosqlite:///{tmp_path}/b.db", **shared)
    body = _raw()
    # the signature covers the path only, so one set of headers is valid for both servers
    headers = {**AUTH, **signed_headers(SIGNING_KEY, "POST", PATH, body)}
    assert (await _post(http, one, body, headers)).status_code == 200
    _refused(await _post(http, two, body, headers), 401, "nonce_replayed")
    _refused(await _post(http, one, body, headers), 401, "nonce_replayed")
    assert fake.stats.requests == 1
    # a fresh nonce is served by the second server: it is the nonce that was refused, not the server
    r = await _signed_post(http, two, body)
    assert r.status_code == 200, r.text
    assert fake.stats.requests == 2
    # the nonce is kept in Redis at least as long as a timestamp can stay inside the window
    with redis.Redis.from_url(REDIS_URL) as client:
        nonce_keys = [k for k in client.scan_iter(match=redis_prefix + "*") if headers["X-Nonce"].encode() in k]
        assert len(nonce_keys) == 1, nonce_keys
        assert client.pttl(nonce_keys[0]) >= window_s * 1000
