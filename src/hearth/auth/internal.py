"""Who is calling: caller keys, the shared internal token, and request signatures (seed 000).

Three ways in, checked in this order:

1. ``Authorization: Bearer <caller key>`` — the caller owning the key;
2. ``X-Internal-Token: <shared token>`` (when ``HEARTH_INTERNAL_TOKEN`` is set) — the caller named by
   ``X-Hearth-Caller``, else ``HEARTH_INTERNAL_TOKEN_CALLER``;
3. nothing → 401.

Then, if the caller must sign (``require_signature`` on the caller, or ``HEARTH_REQUIRE_SIGNATURES``
for everyone), the request must carry a valid ``X-Timestamp``/``X-Nonce``/``X-Signature`` made
with the caller's signing key (else the global ``HEARTH_SIGNATURE_KEY``); a nonce is accepted once.
That holds for body-less GET routes too (:func:`hearth.api.deps.authenticate_caller`). A caller
whose stored signing key cannot be decrypted never gets here as "a caller without a key": loading
the registry fails instead (:func:`hearth.registry.callers.decrypt_signing_key`), so nobody is switched
to the global key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers

from hearth.auth.signing import SignatureError, raw_path_with_query, verify_request
from hearth.errors import HearthError
from hearth.registry.snapshot import Caller, Registry
from hearth.settings import Settings


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def identify_caller(headers: Mapping[str, str], registry: Registry, settings: Settings) -> Caller:
    token = bearer_token(headers)
    if token is not None:
        caller = registry.callers_by_key_hash.get(hashlib.sha256(token.encode()).hexdigest())
        if caller is None:
            raise HearthError("invalid_api_key", "Incorrect API key provided.")
    else:
        shared = headers.get("x-internal-token")
        if shared is None or settings.internal_token is None:
            raise HearthError("invalid_api_key", "Missing API key: send `Authorization: Bearer <key>`.")
        if not hmac.compare_digest(shared.encode(), settings.internal_token.encode()):
            raise HearthError("invalid_api_key", "Incorrect internal token.")
        name = headers.get("x-hearth-caller") or settings.internal_token_caller
        found = registry.callers_by_name.get(name)
        if found is None:
            raise HearthError("invalid_api_key", f"Unknown caller `{name}` for the internal token.")
        caller = found
    if not caller.enabled:
        raise HearthError("caller_disabled")
    return caller


_SIGNING_HEADERS = frozenset({b"x-timestamp", b"x-nonce", b"x-signature"})
PendingNonce = tuple[str, float]  # (state key, TTL): claimed atomically with the call's admission


async def check_signature(caller: Caller, scope: Mapping[str, Any], body: bytes, settings: Settings, *,
                          not_before: float | None = None) -> PendingNonce | None:
    """Verify the signature if this caller must sign; return the nonce still to be claimed.

    The nonce is not claimed here: the gateway claims it inside the same atomic state-backend step
    that admits the call (one round trip fewer per signed request), and routes without admission
    claim it themselves (:func:`hearth.api.deps.authenticate_caller`). A replay then fails with
    ``nonce_replayed``; a request refused before the claim consumed nothing, and its replay is
    refused the same way.

    ``not_before`` (unix seconds) is when the state backend last lost its nonces (None: never, as far
    as this process knows). A request whose ``X-Timestamp`` is older is refused with
    ``nonce_store_reset`` - checked after the signature is verified and before any nonce is claimed,
    so a forged request still consumes nothing and a captured one cannot be replayed after a loss.
    """
    if not (caller.require_signature or settings.require_signatures):
        return None
    key = caller.signing_key or settings.signature_key
    if key is None:
        raise HearthError("signature_required", "Signatures are required but no signing key is configured "
                          "for this caller; ask the operator.")
    pending: list[PendingNonce] = []

    async def defer(nonce_key: str, ttl_s: float) -> bool:
        pending.append((nonce_key, ttl_s))
        return True

    # Only the signing headers, in one pass over the raw list: verify_request looks each one up by
    # scanning, and decoding every header of the request three times was a visible share of a
    # signed call's cost. Repeats are kept (as Headers), so a doubled header is still refused.
    found: dict[str, str] = {}
    signing: Mapping[str, str] = found
    for k, v in scope["headers"]:
        if k in _SIGNING_HEADERS:
            name = k.decode("latin-1")
            if name in found:  # repeated: as Headers, which keeps every value (and verify_request refuses)
                signing = Headers(raw=[(k, v) for k, v in scope["headers"] if k in _SIGNING_HEADERS])
                break
            found[name] = v.decode("latin-1")
    try:
        await verify_request(key=key, method=scope["method"], path_with_query=raw_path_with_query(scope), body=body,
                             headers=signing, claim_nonce=defer, window_s=settings.signature_window_s,
                             not_before=not_before)
    except SignatureError as exc:
        raise HearthError(exc.code, exc.message, details=exc.details) from exc
    return pending[0] if pending else None

