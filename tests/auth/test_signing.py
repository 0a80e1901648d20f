"""Request signing: the documented test vectors, the verification contract, and the wire path.

The vectors are parsed out of ``docs/signing.md`` so the page other teams implement from cannot drift
from the code. The wire tests run a real uvicorn server (h11 and httptools) so ``raw_path_with_query``
is checked against what an HTTP server actually puts in the ASGI scope, not against our assumptions.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.datastructures import Headers

from hearth.auth.signing import (
    SIGNATURE_ERROR_CODES,
    SignatureError,
    canonical_string,
    hmac_sha256,
    raw_path_with_query,
    sha256_hex,
    sign,
    signed_headers,
    verify_request,
)
from tests.support import load_signing_vectors

KEY = "hk-unit-test-signing-key"
T0 = 1_750_000_000


class NonceStore:
    """In-memory ``claim_once`` with TTLs on an injectable clock, recording every claim."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.expiry: dict[str, float] = {}
        self.calls: list[tuple[str, float]] = []

    async def claim(self, key: str, ttl_s: float) -> bool:
        self.calls.append((key, ttl_s))
        now = self.clock()
        if self.expiry.get(key, float("-inf")) > now:
            return False
        self.expiry[key] = now + ttl_s
        return True


async def verify(
    headers: Mapping[str, str],
    store: NonceStore,
    *,
    method: str = "POST",
    path: str = "/api/v1/things?x=1",
    body: bytes = b'{"a":1}',
    key: str | bytes = KEY,
    now: float = T0,
    window_s: float = 300,
    not_before: float | None = None,
) -> None:
    await verify_request(key=key, method=method, path_with_query=path, body=body, headers=headers,
                         claim_nonce=store.claim, window_s=window_s, now=now, not_before=not_before)


def make(
    *, method: str = "POST", path: str = "/api/v1/things?x=1", body: bytes = b'{"a":1}', ts: int = T0,
    nonce: str = "nonce-0001", key: str | bytes = KEY,
) -> dict[str, str]:
    return signed_headers(key, method, path, body, timestamp=ts, nonce=nonce)


async def expect_error(code: str, awaitable: Awaitable[None]) -> SignatureError:
    with pytest.raises(SignatureError) as info:
        await awaitable
    assert info.value.code == code, info.value
    return info.value


# --- documented test vectors ---------------------------------------------------------------------------


def test_docs_cover_the_required_vector_kinds() -> None:
    vectors = load_signing_vectors()
    assert len(vectors) >= 3
    assert any(v["body_hex"] == "" for v in vectors), "a vector with an empty body"
    assert any("?" in v["path_with_query"] and not v["body_utf8"].isascii() for v in vectors), \
        "a vector with a query string and a non-ASCII (UTF-8) body"
    assert any("%" in v["path_with_query"].split("?")[0] for v in vectors), "a vector with a percent-encoded path"


@pytest.mark.parametrize("vector", load_signing_vectors(), ids=lambda v: v["name"])
async def test_documented_vector(vector: dict[str, str]) -> None:
    body = bytes.fromhex(vector["body_hex"])
    assert body.decode("utf-8") == vector["body_utf8"]
    assert sha256_hex(body) == vector["body_sha256"]
    canonical = canonical_string(vector["method"], vector["path_with_query"], body, vector["timestamp"],
                                 nonce=vector["nonce"])
    assert canonical == vector["canonical"]
    assert canonical.split("\n") == [vector["method"], vector["path_with_query"], vector["body_sha256"],
                                     vector["timestamp"], vector["nonce"]]
    assert sign(vector["key"], vector["method"], vector["path_with_query"], body, timestamp=vector["timestamp"],
                nonce=vector["nonce"]) == vector["signature"]
    assert sign(vector["key"].encode(), vector["method"], vector["path_with_query"], body,
                timestamp=vector["timestamp"],
                nonce=vector["nonce"]) == vector["signature"]
    # independent of our code: the stdlib primitives applied to the documented canonical string
    assert hmac.new(vector["key"].encode(), vector["canonical"].encode(), hashlib.sha256).hexdigest() \
        == vector["signature"]
    assert signed_headers(vector["key"], vector["method"], "https://hearth.example:8443" + vector["path_with_query"],
                          body, timestamp=int(vector["timestamp"]), nonce=vector["nonce"]) == {
        "X-Timestamp": vector["timestamp"], "X-Nonce": vector["nonce"], "X-Signature": vector["signature"]}
    headers = {"X-Timestamp": vector["timestamp"], "X-Nonce": vector["nonce"], "X-Signature": vector["signature"]}
    await verify(headers, NonceStore(), method=vector["method"], path=vector["path_with_query"], body=body,
                 key=vector["key"], now=int(vector["timestamp"]))


@pytest.mark.parametrize("key_len", [1, 24, 63, 64, 65, 200])
def test_hmac_from_a_cached_keyed_context_equals_the_standard_hmac(key_len: int) -> None:
    """Keys shorter than, equal to and longer than SHA-256's block (a long key is hashed first, RFC 2104)."""
    key = bytes((7 * i + key_len) % 256 for i in range(key_len))
    for message in (b"", b"POST\n/v1/chat/completions\n" + b"x" * 300):
        assert hmac_sha256(key, message) == hmac.digest(key, message, "sha256")
        assert hmac_sha256(key, message) == hmac.digest(key, message, "sha256")  # a second time, from the cache


def test_method_is_upper_cased() -> None:
    assert canonical_string("post", "/x", b"", "1", nonce="nonce-0001").startswith("POST\n/x\n")
    assert sign(KEY, "post", "/x", b"", timestamp="1", nonce="nonce-0001") == sign(KEY, "POST", "/x", b"",
                                                                               timestamp="1", nonce="nonce-0001")


# --- round trips ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["dict", "lower", "upper", "starlette"])
async def test_round_trip_any_header_mapping(case: str) -> None:
    signed = make()
    headers: Mapping[str, str]
    if case == "dict":
        headers = signed
    elif case == "lower":
        headers = {k.lower(): v for k, v in signed.items()}
    elif case == "upper":
        headers = {k.upper(): v for k, v in signed.items()}
    else:
        headers = Headers(raw=[(k.lower().encode(), v.encode()) for k, v in signed.items()])
    store = NonceStore()
    await verify(headers, store)
    assert len(store.calls) == 1


async def test_round_trip_defaults_and_full_url_match_what_httpx_sends() -> None:
    url = "https://hearth.example:8443/api/v1/files/%E5%90%88%E5%90%8C?tag=a%2Bb&q=%E4%B8%AD#section"
    body = '{"text":"你好"}'.encode()
    before = int(time.time())
    headers = signed_headers(KEY, "POST", url, body)
    assert before <= int(headers["X-Timestamp"]) <= int(time.time())
    assert re.fullmatch(r"[A-Za-z0-9_-]{32}", headers["X-Nonce"])
    assert headers["X-Nonce"] != signed_headers(KEY, "POST", url, body)["X-Nonce"]
    wire = httpx.Request("POST", url).url.raw_path.decode("ascii")
    await verify(headers, NonceStore(), path=wire, body=body, now=time.time())


async def test_nonce_claim_key_is_scoped_by_key_and_ttl_is_twice_the_window() -> None:
    store = NonceStore(clock=lambda: T0)
    await verify(make(nonce="shared-nonce"), store, window_s=120)
    await verify(make(nonce="shared-nonce", key="another-key"), store, key="another-key", window_s=120)
    assert store.calls == [
        (f"nonce:{hashlib.sha256(KEY.encode()).hexdigest()[:16]}:shared-nonce", 240),
        (f"nonce:{hashlib.sha256(b'another-key').hexdigest()[:16]}:shared-nonce", 240),
    ]


async def test_replay_is_rejected() -> None:
    store = NonceStore(clock=lambda: T0)
    headers = make()
    await verify(headers, store)
    error = await expect_error("nonce_replayed", verify(headers, store, now=T0 + 5))
    assert error.status == 401


async def test_replay_stays_rejected_until_the_timestamp_itself_is_stale() -> None:
    clock = [float(T0)]
    store = NonceStore(clock=lambda: clock[0])
    headers = make()
    await verify(headers, store)
    for offset in (1, 150, 300, 599):
        clock[0] = T0 + offset
        code = "nonce_replayed" if offset <= 300 else "timestamp_out_of_window"
        await expect_error(code, verify(headers, store, now=T0 + offset))


async def test_claim_failure_propagates() -> None:
    async def broken(key: str, ttl: float) -> bool:
        raise ConnectionError("state backend down")

    with pytest.raises(ConnectionError):
        await verify_request(key=KEY, method="POST", path_with_query="/api/v1/things?x=1", body=b'{"a":1}',
                             headers=make(), claim_nonce=broken, now=T0)


# --- tampering -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("body", b'{"a":2}'),
    ("body", b'{"a":1}\n'),
    ("body", b""),
    ("method", "PUT"),
    ("path", "/api/v1/other?x=1"),
    ("path", "/api/v1/things/?x=1"),
    ("path", "/api/v1/things?x=2"),
    ("path", "/api/v1/things?x=1&y=2"),
    ("path", "/api/v1/things"),
    ("path", "/api/v1/%74hings?x=1"),
    ("key", "hk-some-other-key"),
])
async def test_tampering_is_signature_invalid_and_burns_no_nonce(field: str, value: Any) -> None:
    store = NonceStore(clock=lambda: T0)
    headers = make()
    kwargs: dict[str, Any] = {field: value}
    error = await expect_error("signature_invalid", verify(headers, store, **kwargs))
    assert store.calls == []
    assert error.details["nonce"] == "nonce-0001"
    await verify(headers, store)  # the genuine request still passes with the same nonce


async def test_forged_signature_does_not_consume_the_nonce() -> None:
    store = NonceStore(clock=lambda: T0)
    genuine = make(nonce="victim-nonce")
    forged = dict(genuine, **{"X-Signature": "0" * 64})
    for _ in range(3):
        await expect_error("signature_invalid", verify(forged, store))
    await verify(genuine, store)
    await expect_error("nonce_replayed", verify(genuine, store))


async def test_signature_invalid_details_help_without_leaking() -> None:
    store = NonceStore()
    headers = make()
    error = await expect_error("signature_invalid", verify(headers, store, body=b"other"))
    assert error.details == {"method": "POST", "path_with_query": "/api/v1/things?x=1",
                             "body_sha256": sha256_hex(b"other"), "timestamp": str(T0), "nonce": "nonce-0001"}


# --- timestamps ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [-301, 301, -86_400, 86_400])
async def test_timestamp_outside_window_in_both_directions(offset: int) -> None:
    store = NonceStore()
    error = await expect_error("timestamp_out_of_window", verify(make(ts=T0 + offset), store))
    assert store.calls == []
    assert ("behind" if offset < 0 else "ahead of") in error.message


@pytest.mark.parametrize("offset", [-300, 0, 300])
async def test_timestamp_at_the_window_edges_is_accepted(offset: int) -> None:
    await verify(make(ts=T0 + offset), NonceStore())


async def test_window_is_checked_before_the_signature() -> None:
    headers = dict(make(ts=T0 - 1000), **{"X-Signature": "f" * 64})
    await expect_error("timestamp_out_of_window", verify(headers, NonceStore()))


async def test_window_is_configurable() -> None:
    await expect_error("timestamp_out_of_window", verify(make(ts=T0 - 31), NonceStore(), window_s=30))
    await verify(make(ts=T0 - 3000), NonceStore(), window_s=3600)


async def test_milliseconds_get_a_hint() -> None:
    error = await expect_error("timestamp_out_of_window", verify(make(ts=T0 * 1000), NonceStore()))
    assert "milliseconds" in error.message


# --- missing and malformed headers ---------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["X-Timestamp", "X-Nonce", "X-Signature"])
async def test_missing_header(missing: str) -> None:
    headers = {k: v for k, v in make().items() if k != missing}
    store = NonceStore()
    error = await expect_error("signature_required", verify(headers, store))
    assert missing in error.message
    assert store.calls == []


@pytest.mark.parametrize(("header", "value"), [
    ("X-Timestamp", ""),
    ("X-Timestamp", "1.75e9"),
    ("X-Timestamp", f"{T0}.5"),
    ("X-Timestamp", f"-{T0}"),
    ("X-Timestamp", f"+{T0}"),
    ("X-Timestamp", f"{T0}s"),
    ("X-Timestamp", "１７５００００００００"),  # full-width digits: str.isdigit() would accept them
    ("X-Timestamp", "9" * 400),
    ("X-Signature", ""),
    ("X-Signature", "A" * 64),
    ("X-Signature", "a" * 63),
    ("X-Signature", "a" * 65),
    ("X-Signature", "g" * 64),
    ("X-Signature", "sha256=" + "a" * 64),
])
async def test_malformed_header(header: str, value: str) -> None:
    headers = dict(make(), **{header: value})
    await expect_error("signature_required", verify(headers, NonceStore()))


@pytest.mark.parametrize("nonce", [
    "short7c",  # 7 chars
    "n" * 129,
    "nonce-héllo",
    "nonce-文档-0001",
    "nonce with space",
    "nonce.with.dots",
    "nonce/with/slash",
    "nonce-0001\n",
    "ｎｏｎｃｅ-0001",  # full-width letters
])
async def test_bad_nonce_is_signature_required(nonce: str) -> None:
    headers = dict(make(), **{"X-Nonce": nonce})
    store = NonceStore()
    await expect_error("signature_required", verify(headers, store))
    assert store.calls == []
    with pytest.raises(ValueError):
        make(nonce=nonce)


@pytest.mark.parametrize("nonce", ["n" * 8, "N" * 128, "a_b-C_d-0123"])
async def test_nonce_length_and_alphabet_bounds_are_accepted(nonce: str) -> None:
    await verify(make(nonce=nonce), NonceStore())


async def test_repeated_header_is_refused() -> None:
    signed = make()
    raw = [(k.lower().encode(), v.encode()) for k, v in signed.items()]
    headers = Headers(raw=[*raw, (b"x-nonce", b"another-nonce")])
    await expect_error("signature_required", verify(headers, NonceStore()))
    await expect_error("signature_required", verify({**signed, "x-nonce": "another-nonce"}, NonceStore()))


async def test_surrounding_whitespace_is_not_part_of_a_value() -> None:
    await verify({k: f" {v}\t" for k, v in make().items()}, NonceStore())


async def test_error_messages_never_contain_the_key_or_expected_signature() -> None:
    key = "hk-very-secret-signing-key"
    genuine = make(key=key)
    expected = genuine["X-Signature"]
    attempts: list[tuple[dict[str, str], dict[str, Any]]] = [
        ({}, {}),
        (dict(genuine, **{"X-Signature": "a" * 64}), {}),
        (genuine, {"body": b"changed"}),
        (genuine, {"now": T0 + 10_000}),
        (dict(genuine, **{"X-Nonce": "x"}), {}),
        (genuine, {"not_before": T0 + 1}),
    ]
    store = NonceStore(clock=lambda: T0)
    errors: list[SignatureError] = []
    for headers, kwargs in attempts:
        with pytest.raises(SignatureError) as info:
            await verify(headers, store, key=key, **kwargs)
        errors.append(info.value)
    await verify(genuine, store, key=key)
    with pytest.raises(SignatureError) as info:
        await verify(genuine, store, key=key)
    errors.append(info.value)
    assert {e.code for e in errors} == set(SIGNATURE_ERROR_CODES)
    for error in errors:
        text = f"{error} {error.message} {error.details!r} {error.args!r}"
        assert key not in text and expected not in text


def test_misconfiguration_is_a_value_error_not_a_caller_error() -> None:
    with pytest.raises(ValueError):
        asyncio.run(verify(make(), NonceStore(), key=""))
    with pytest.raises(ValueError):
        asyncio.run(verify(make(), NonceStore(), window_s=0))
    with pytest.raises(ValueError):
        sign(b"", "GET", "/", b"", timestamp="1", nonce="nonce-0001")
    with pytest.raises(ValueError):
        SignatureError("not_a_code", "x")  # type: ignore[arg-type]


# --- canonical string guards ---------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), [
    ("GET\n/evil", "/x"),
    ("GET", "/x\n/y"),
    ("GET", "/x y"),
    ("GET", "/文档"),
    ("GET", "x"),
    ("GET", ""),
    ("GET", "/x?"),
    ("", "/x"),
])
def test_canonical_string_refuses_what_cannot_be_on_the_wire(method: str, path: str) -> None:
    with pytest.raises(ValueError):
        canonical_string(method, path, b"", "1", nonce="nonce-0001")


async def test_unsignable_target_on_the_server_is_signature_invalid() -> None:
    await expect_error("signature_invalid", verify(make(), NonceStore(), path="/x\n/y"))


def test_body_must_be_bytes() -> None:
    with pytest.raises(TypeError):
        sign(KEY, "POST", "/x", "text", timestamp="1", nonce="nonce-0001")  # type: ignore[arg-type]


# --- the caller helper's URL handling ------------------------------------------------------------------


@pytest.mark.parametrize(("url", "expected"), [
    ("https://hearth.example/v1/models", "/v1/models"),
    ("http://hearth.example:8080/api/x?a=1&b=2", "/api/x?a=1&b=2"),
    ("HTTPS://hearth.example", "/"),
    ("https://hearth.example?a=1", "/?a=1"),
    ("https://hearth.example/x?", "/x"),
    ("https://hearth.example/x#frag", "/x"),
    ("https://hearth.example/x?a=1#frag", "/x?a=1"),
    ("https://user:pw@hearth.example/x", "/x"),
    ("https://hearth.example/%E6%96%87%e6%a1%a3?q=%2B+x", "/%E6%96%87%e6%a1%a3?q=%2B+x"),
    ("https://hearth.example/a%2Fb/c", "/a%2Fb/c"),
    ("https://hearth.example//double//slash", "//double//slash"),
    ("https://hearth.example/a'b!$&()*+,;=:@~?q='!$&()*+,;=:@/?~", "/a'b!$&()*+,;=:@~?q='!$&()*+,;=:@/?~"),
    ("https://hearth.example/a/.../b", "/a/.../b"),
    ("/api/x?a=1", "/api/x?a=1"),
    ("/api/x?", "/api/x"),
    ("//not-a-host/x", "//not-a-host/x"),
])
def test_signed_headers_signs_the_wire_target(url: str, expected: str) -> None:
    headers = signed_headers(KEY, "GET", url, timestamp=T0, nonce="nonce-0001")
    assert headers["X-Signature"] == sign(KEY, "GET", expected, b"", timestamp=str(T0), nonce="nonce-0001")
    if url.lower().startswith("http"):
        wire = httpx.Request("GET", url).url
        assert raw_path_with_query({"raw_path": wire.raw_path, "query_string": wire.query}) == expected


@pytest.mark.parametrize("url", [
    "https://hearth.example/文档",
    "https://hearth.example/x?q=中",
    "https://hearth.example/a b",
    "https://hearth.example/a|b",
    "https://hearth.example/a\"b",
    "https://hearth.example/x?filter[a]=1",
    "https://hearth.example/100%",
    "https://hearth.example/%zz",
    "https://hearth.example/a/../b",
    "https://hearth.example/a/./b",
    "https://hearth.example/a/..",
    "api/x",
    "hearth.example/api/x",
    "",
    "https://hearth.example/x\n",
])
def test_signed_headers_refuses_urls_a_client_would_rewrite(url: str) -> None:
    with pytest.raises(ValueError):
        signed_headers(KEY, "GET", url)


def test_signed_headers_refuses_bad_timestamps() -> None:
    for ts in (-1, True):
        with pytest.raises(ValueError):
            signed_headers(KEY, "GET", "/x", timestamp=ts)


# --- raw_path_with_query -------------------------------------------------------------------------------


@pytest.mark.parametrize(("scope", "expected"), [
    ({"path": "/a b", "raw_path": b"/a%20b", "query_string": b""}, "/a%20b"),
    ({"path": "/合同", "raw_path": b"/%E5%90%88%E5%90%8C", "query_string": b"x=%2B1&y=+"},
     "/%E5%90%88%E5%90%8C?x=%2B1&y=+"),
    ({"path": "/a/b", "raw_path": b"/a%2Fb", "query_string": b"q"}, "/a%2Fb?q"),
    ({"path": "/x", "raw_path": b"/x?leaked=1", "query_string": b"leaked=1"}, "/x?leaked=1"),
    ({"path": "/x", "raw_path": b"/x"}, "/x"),
    ({"path": "/x", "raw_path": None, "query_string": b"a=1"}, "/x?a=1"),
    ({"path": "/合同 2024", "query_string": b""}, "/%E5%90%88%E5%90%8C%202024"),
    ({"path": "/a:b@c;d=e", "query_string": b""}, "/a:b@c;d=e"),
    ({"path": "/x", "raw_path": b"/\xe4", "query_string": b"\xff"}, "/\xe4?\xff"),
])
def test_raw_path_with_query(scope: dict[str, Any], expected: str) -> None:
    assert raw_path_with_query(scope) == expected


# --- over a real HTTP server ---------------------------------------------------------------------------


class _SigningApp:
    """A bare ASGI app that verifies signatures the way Hearth's middleware is meant to."""

    def __init__(self) -> None:
        self.store = NonceStore()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = raw_path_with_query(scope)
        try:
            await verify_request(key=KEY, method=scope["method"], path_with_query=target, body=body,
                                 headers=Headers(scope=scope), claim_nonce=self.store.claim)
            status, payload = 200, {"ok": True, "target": target}
        except SignatureError as exc:
            status, payload = 401, {"code": exc.code, "target": target}
        data = json.dumps(payload).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})


@pytest.fixture(params=["h11", "httptools"])
def signing_server(request: pytest.FixtureRequest) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(_SigningApp(), host="127.0.0.1", port=port, http=request.param, log_config=None,
                            access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/v1/models", b""),
    ("POST", "/api/v1/capabilities/summarize?lang=zh-CN&trace=1", '{"text":"你好，世界"}'.encode()),
    ("PUT", "/api/v1/files/%E5%90%88%E5%90%8C%202024.pdf/metadata?tag=a%2Bb", '{"title":"合同"}\n'.encode()),
    ("DELETE", "/api/v1/a%2Fb//c?x=%e4%b8%ad&y=1+2", b""),
])
def test_signed_request_over_the_wire(signing_server: str, method: str, path: str, body: bytes) -> None:
    url = signing_server + path
    with httpx.Client(timeout=10) as client:
        headers = signed_headers(KEY, method, url, body)
        first = client.request(method, url, content=body, headers=headers)
        assert first.status_code == 200, first.text
        assert first.json()["target"] == path
        replay = client.request(method, url, content=body, headers=headers)
        assert replay.json() == {"code": "nonce_replayed", "target": path}
        tampered = client.request(method, url + ("&" if "?" in url else "?") + "z=1", content=body,
                                  headers=signed_headers(KEY, method, url, body))
        assert tampered.json()["code"] == "signature_invalid"
