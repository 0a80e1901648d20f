"""The OpenAI-compatible face: ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/models``.

Requests, responses, streams and errors follow OpenAI's formats exactly, so the official SDKs
work unchanged. Bodies are parsed with orjson and checked by hand (not by a pydantic model) to
keep the hot path cheap; the documentation models live in :mod:`hearth.api.openai_schemas`.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.budget_headers import budget_headers
from hearth.api.call_limits import caller_max_attempts, caller_timeout_s
from hearth.api.chat_validation import validate_chat, validate_embeddings
from hearth.api.deps import (
    authenticate_caller,
    authenticated_body,
    client_ip,
    request_id,
    runtime,
)
from hearth.api.event_stream import EventStreamResponse
from hearth.api.openai_schemas import (
    ERROR_RESPONSES,
    ChatCompletion,
    ChatCompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    ModelList,
    ModelObject,
    request_body,
)
from hearth.api.request_body import parse_json_object
from hearth.auth.internal import PendingNonce
from hearth.errors import HearthError
from hearth.gateway.context import CallContext
from hearth.gateway.model_name import shown_model
from hearth.gateway.scenes import caller_may_see
from hearth.providers.base import HeaderExchange
from hearth.registry.snapshot import Caller, Registry
from hearth.wire.model_name import public_model_body

router = APIRouter(prefix="/v1", tags=["openai"])

def _end_user(request: Request, body: dict[str, Any]) -> str | None:
    user = request.headers.get("x-hearth-user") or body.get("user")
    return user[:256] if isinstance(user, str) and user else None


def _context(request: Request, caller: Caller, body: dict[str, Any], route: str,
             *, nonce: PendingNonce | None) -> CallContext:
    tenant = request.headers.get("x-hearth-tenant")
    return CallContext(request_id=request_id(request), caller=caller, route=route,
                       end_user=_end_user(request, body), tenant=tenant[:256] if tenant else None,
                       client_ip=client_ip(request), requested_scene=request.headers.get("x-hearth-scene"),
                       pending_nonce=nonce, timeout_s=caller_timeout_s(request.headers),
                       max_attempts=caller_max_attempts(request.headers), headers=HeaderExchange(request.headers))


@router.post("/chat/completions", summary="Create a chat completion (stream or not)",
             openapi_extra=request_body(ChatCompletionRequest),
             responses={200: {"model": ChatCompletion, "content": {"text/event-stream": {}}}, **ERROR_RESPONSES})
async def chat_completions(request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_json_object(raw)
    validate_chat(body)
    gw = runtime(request).gateway
    ctx = _context(request, caller, body, "chat", nonce=nonce)
    if body.get("stream"):
        # opened by the response, which sends keep-alives if the first event is slow (see event_stream)
        return EventStreamResponse.opening(gw.open_stream(ctx, body), lambda: _call_headers(ctx),
                                           keepalive_s=runtime(request).settings.sse_keepalive_s)
    reply = await gw.complete(ctx, body)
    return Response(_public_reply(gw.registry, ctx, reply.body), media_type="application/json",
                    headers=_call_headers(ctx))


def _call_headers(ctx: CallContext) -> dict[str, str]:
    ep = ctx.endpoint
    headers = {"x-hearth-endpoint": ep.name if ep else "", "x-hearth-attempts": str(ctx.attempts),
               "x-hearth-model": ctx.model or "", "x-hearth-upstream-model": ep.upstream_model if ep else ""}
    if ctx.budget_left:
        headers.update(budget_headers(ctx.budget_left))
    if ctx.headers is not None and ctx.headers.relayed:  # the upstream's x-ratelimit-*, if its provider relays them
        headers.update(ctx.headers.relayed)
    return headers


def _public_reply(registry: Registry, ctx: CallContext, body: bytes) -> bytes:
    """A non-stream answer's ``model`` shows the public name the caller asked for, unless that model
    exposes the upstream's (``expose_upstream_model``); the upstream's is in ``x-hearth-upstream-model``.
    Streams follow the same rule (:class:`~hearth.gateway.relay.RelayStream`)."""
    public = shown_model(registry, ctx.model, ctx.endpoint)
    return body if public is None else public_model_body(body, public)


@router.post("/embeddings", summary="Create embeddings", openapi_extra=request_body(EmbeddingRequest),
             responses={200: {"model": EmbeddingResponse}, **ERROR_RESPONSES})
async def embeddings(request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_json_object(raw)
    validate_embeddings(body)
    ctx = _context(request, caller, body, "embeddings", nonce=nonce)
    gw = runtime(request).gateway
    reply = await gw.embed(ctx, body)
    return Response(_public_reply(gw.registry, ctx, reply.body), media_type="application/json",
                    headers=_call_headers(ctx))


@router.get("/models", summary="List the models this caller can use",
            responses={200: {"model": ModelList}, **ERROR_RESPONSES})
async def list_models(request: Request) -> Response:
    caller = await authenticate_caller(request)
    registry = runtime(request).gateway.registry
    data = [{"id": m.name, "object": "model", "created": registry.created_at, "owned_by": "hearth"}
            for m in sorted(registry.models.values(), key=lambda m: m.name) if caller_may_see(registry, caller, m)]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")


@router.get("/models/{model_id:path}", summary="Retrieve one model",
            responses={200: {"model": ModelObject}, **ERROR_RESPONSES})
async def get_model(model_id: str, request: Request) -> Response:
    caller = await authenticate_caller(request)
    registry = runtime(request).gateway.registry
    m = registry.models.get(model_id)
    if m is None or not caller_may_see(registry, caller, m):  # as OpenAI answers a model you may not use
        raise HearthError("model_not_found", f"The model `{model_id}` does not exist or you do not have access "
                          "to it.", param="model")
    return Response(orjson.dumps({"id": m.name, "object": "model", "created": registry.created_at,
                                  "owned_by": "hearth"}), media_type="application/json")


# The other doors onto the same core (Anthropic Messages, …) build their calls and answer headers the same way.
call_context, call_headers = _context, _call_headers
