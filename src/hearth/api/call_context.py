"""What every door onto the gateway core builds the same way: the call's context from the request (caller,
end user, tenant, scene, the caller's own deadline and attempt budget, the headers exchanged with the
upstream), the ``x-hearth-*`` answer headers, and the public model name in a non-stream answer.

The chat route (:mod:`hearth.api.openai`) and the other doors — Responses, Anthropic Messages, images —
use these, so a call looks the same in the request log, the limits and the answer whichever door it came in by.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from hearth.api.budget_headers import budget_headers
from hearth.api.call_limits import caller_max_attempts, caller_timeout_s
from hearth.api.deps import client_ip, request_id
from hearth.auth.internal import PendingNonce
from hearth.gateway.context import CallContext
from hearth.gateway.model_name import shown_model
from hearth.providers.base import HeaderExchange
from hearth.registry.snapshot import Caller, Registry
from hearth.wire.model_name import public_model_body


def end_user(request: Request, body: dict[str, Any]) -> str | None:
    user = request.headers.get("x-hearth-user") or body.get("user")
    return user[:256] if isinstance(user, str) and user else None


def call_context(request: Request, caller: Caller, body: dict[str, Any], route: str,
                 *, nonce: PendingNonce | None) -> CallContext:
    tenant = request.headers.get("x-hearth-tenant")
    return CallContext(request_id=request_id(request), caller=caller, route=route,
                       end_user=end_user(request, body), tenant=tenant[:256] if tenant else None,
                       client_ip=client_ip(request), requested_scene=request.headers.get("x-hearth-scene"),
                       pending_nonce=nonce, timeout_s=caller_timeout_s(request.headers),
                       max_attempts=caller_max_attempts(request.headers), headers=HeaderExchange(request.headers))


def call_headers(ctx: CallContext) -> dict[str, str]:
    ep = ctx.endpoint
    headers = {"x-hearth-endpoint": ep.name if ep else "", "x-hearth-attempts": str(ctx.attempts),
               "x-hearth-model": ctx.model or "", "x-hearth-upstream-model": ep.upstream_model if ep else ""}
    if ctx.budget_left:
        headers.update(budget_headers(ctx.budget_left))
    if ctx.headers is not None and ctx.headers.relayed:  # the upstream's x-ratelimit-*, if its provider relays them
        headers.update(ctx.headers.relayed)
    return headers


def public_reply(registry: Registry, ctx: CallContext, body: bytes) -> bytes:
    """A non-stream answer's ``model`` shows the public name the caller asked for, unless that model
    exposes the upstream's (``expose_upstream_model``); the upstream's is in ``x-hearth-upstream-model``.
    Streams follow the same rule (:class:`~hearth.gateway.relay.RelayStream`)."""
    public = shown_model(registry, ctx.model, ctx.endpoint)
    return body if public is None else public_model_body(body, public)
