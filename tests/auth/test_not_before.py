"""``not_before``: after the nonce store lost its data, requests signed before the loss are refused.

The bound is checked after the signature (a forged request learns nothing and consumes nothing) and
before the nonce claim (a refused request consumes no nonce: signed again, it passes). These tests
call :func:`hearth.auth.internal.check_signature` and :func:`hearth.auth.signing.verify_request`
directly; where ``not_before`` comes from (the state backend's loss detection) is tested with it.
"""

from __future__ import annotations

from typing import Any

import pytest

from hearth.auth.internal import check_signature
from hearth.auth.signing import SignatureError, signed_headers, verify_request
from hearth.errors import CATALOG, HearthError
from hearth.registry.snapshot import Caller, CallerLimits
from hearth.settings import Settings

KEY = "hk-not-before-signing-key-01"
PATH = "/v1/chat/completions"
BODY = b'{"model":"m","messages":[]}'
T0 = 1_750_000_000
MESSAGE = ("The replay-protection store was reset after this request was signed; "
           "sign it again with a fresh timestamp.")


def _caller() -> Caller:
    return Caller(name="tester", enabled=True, allowed_models=None, allowed_scenes=None, default_scene=None,
                  signing_key=KEY, require_signature=True, limits=CallerLimits())


def _scope(headers: dict[str, str], method: str = "POST", path: str = PATH) -> dict[str, Any]:
    return {"type": "http", "method": method, "raw_path": path.encode(), "query_string": b"",
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]}


async def _check(headers: dict[str, str], not_before: float | None, body: bytes = BODY,
                 method: str = "POST", path: str = PATH) -> Any:
    # a window wide enough that the fixed T0 timestamps are never out of it
    settings = Settings(signature_window_s=10**10)
    return await check_signature(_caller(), _scope(headers, method, path), body, settings, not_before=not_before)


def _headers(ts: int, nonce: str = "nonce-not-before-1", body: bytes = BODY, method: str = "POST") -> dict[str, str]:
    return signed_headers(KEY, method, PATH, body, timestamp=ts, nonce=nonce)


def test_the_code_is_in_the_catalog_as_a_401() -> None:
    spec = CATALOG["nonce_store_reset"]
    assert (spec.status, spec.openai_type, spec.message) == (401, "authentication_error", MESSAGE)


@pytest.mark.parametrize("not_before", [T0 + 1, T0 + 0.5, T0 + 3600.0])
async def test_a_request_signed_before_the_loss_is_refused(not_before: float) -> None:
    with pytest.raises(HearthError) as info:
        await _check(_headers(T0), not_before)
    error = info.value
    assert (error.code, error.status, error.spec.openai_type, error.message) == (
        "nonce_store_reset", 401, "authentication_error", MESSAGE)
    assert error.openai_body()["error"]["code"] == "nonce_store_reset"
    assert KEY not in repr(error.details)


@pytest.mark.parametrize("not_before", [None, float(T0), T0 - 0.5, T0 - 3600.0, 0.0])
async def test_a_request_signed_at_or_after_the_loss_passes(not_before: float | None) -> None:
    pending = await _check(_headers(T0), not_before)
    assert pending is not None and pending[0].endswith(":nonce-not-before-1")


async def test_a_nan_bound_fails_closed() -> None:
    with pytest.raises(HearthError) as info:
        await _check(_headers(T0), float("nan"))
    assert info.value.code == "nonce_store_reset"


async def test_the_signature_is_verified_first_so_a_forgery_is_signature_invalid() -> None:
    forged = {**_headers(T0), "X-Signature": "0" * 64}
    with pytest.raises(HearthError) as info:
        await _check(forged, T0 + 100)
    assert info.value.code == "signature_invalid"
    with pytest.raises(HearthError) as info:
        await _check(_headers(T0), T0 + 100, body=b"tampered")
    assert info.value.code == "signature_invalid"


async def test_a_refused_request_claims_no_nonce_and_signed_again_passes() -> None:
    claims: list[tuple[str, float]] = []

    async def claim(key: str, ttl_s: float) -> bool:
        claims.append((key, ttl_s))
        return True

    old = _headers(T0, nonce="reused-nonce-0001")
    with pytest.raises(SignatureError) as info:
        await verify_request(key=KEY, method="POST", path_with_query=PATH, body=BODY, headers=old,
                             claim_nonce=claim, now=T0 + 10, not_before=T0 + 5)
    assert info.value.code == "nonce_store_reset" and claims == []
    fresh = _headers(T0 + 10, nonce="reused-nonce-0001")  # same nonce, fresh timestamp: it was never claimed
    await verify_request(key=KEY, method="POST", path_with_query=PATH, body=BODY, headers=fresh,
                         claim_nonce=claim, now=T0 + 10, not_before=T0 + 5)
    assert len(claims) == 1


async def test_window_errors_come_before_the_bound() -> None:
    async def claim(key: str, ttl_s: float) -> bool:
        return True

    with pytest.raises(SignatureError) as info:
        await verify_request(key=KEY, method="POST", path_with_query=PATH, body=BODY, headers=_headers(T0),
                             claim_nonce=claim, now=T0 + 1000, window_s=300, not_before=T0 + 1)
    assert info.value.code == "timestamp_out_of_window"


async def test_a_signed_get_is_bounded_too() -> None:
    headers = signed_headers(KEY, "GET", "/v1/models", b"", timestamp=T0, nonce="get-nonce-00001")
    with pytest.raises(HearthError) as info:
        await _check(headers, T0 + 1, body=b"", method="GET", path="/v1/models")
    assert info.value.code == "nonce_store_reset"
    assert await _check(headers, T0, body=b"", method="GET", path="/v1/models") is not None
