"""Request-level plumbing shared by routers: the runtime, authentication, JSON body parsing.

Body reading and parsing live in :mod:`hearth.api.request_body`; ``parse_json_object`` is re-exported here.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from fastapi import Request

from hearth.api.request_body import parse_json_object as parse_json_object  # re-exported
from hearth.api.request_body import read_limited
from hearth.auth.internal import PendingNonce, bearer_token, check_signature, identify_caller
from hearth.errors import HearthError
from hearth.registry.snapshot import Caller
from hearth.runtime import Runtime
from hearth.state.base import StateUnavailable


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def request_id(request: Request) -> str:
    rid: str = request.scope.get("state", {}).get("request_id", "")
    return rid


async def authenticate_caller(request: Request, headers: Mapping[str, str] | None = None) -> Caller:
    """The calling application (key or shared token) on a route without a body or an admission (GETs).

    A caller that must sign signs these too: the signature is verified over the empty body and its
    nonce is claimed here, once (there is no admission step to claim it in). A refused request
    consumes no nonce. The state backend being down fails closed (503), as at admission.
    ``headers``: as in :func:`authenticated_body`.
    """
    rt = runtime(request)
    caller = identify_caller(request.headers if headers is None else headers, rt.gateway.registry, rt.settings)
    pending = await check_signature(caller, request.scope, b"", rt.settings,
                                    not_before=getattr(rt.state, "lost_at", None))
    await claim_nonce(request, pending)
    return caller


async def claim_nonce(request: Request, pending: PendingNonce | None) -> None:
    """Claim a signed request's nonce now, on a route with no admission step to claim it in; a nonce seen
    before is 401 ``nonce_replayed``, the state backend being down 503 (fail closed)."""
    if pending is None:
        return
    try:
        fresh = await runtime(request).state.claim_once(*pending)
    except StateUnavailable as exc:
        raise HearthError("state_backend_unavailable", retry_after=2) from exc
    if not fresh:
        raise HearthError("nonce_replayed", "This X-Nonce was already used.")


async def authenticated_body(request: Request, headers: Mapping[str, str] | None = None,
                             ) -> tuple[Caller, bytes, PendingNonce | None]:
    """The caller, the raw body and the nonce to claim, with the signature verified when required.

    ``headers``: the request's headers as a door reads them (the Anthropic door reads ``x-api-key`` as
    the caller key); the request's own by default."""
    rt = runtime(request)
    caller = identify_caller(request.headers if headers is None else headers, rt.gateway.registry, rt.settings)
    raw = await read_body(request)
    pending = await check_signature(caller, request.scope, raw, rt.settings,
                                    not_before=getattr(rt.state, "lost_at", None))
    return caller, raw, pending


def client_ip(request: Request) -> str | None:
    if runtime(request).settings.trust_forwarded_for:
        forwarded = request.headers.get("x-forwarded-for")
        if forwarded:
            return forwarded.split(",", 1)[0].strip()[:64] or None
    return request.client.host if request.client else None


def require_admin(request: Request) -> None:
    expected = runtime(request).settings.admin_token
    token = bearer_token(request.headers)
    if not expected:
        raise HearthError("forbidden", "The admin API is off: set HEARTH_ADMIN_TOKEN to enable it.")
    if token is None or not hmac.compare_digest(token.encode(), expected.encode()):
        raise HearthError("admin_token_required")


async def read_body(request: Request) -> bytes:
    """The raw body, refused with 413 the moment it passes ``max_request_bytes`` (see :mod:`request_body`)."""
    return await read_limited(request, runtime(request).settings.max_request_bytes)


async def read_json_object(request: Request) -> dict[str, Any]:
    return parse_json_object(await read_body(request))
