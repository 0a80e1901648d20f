"""The OpenAI-compatible face: ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/models``.

Requests, responses, streams and errors follow OpenAI's formats exactly, so the official SDKs
work unchanged. Bodies are parsed with orjson and checked by hand (not by a pydantic model) to
keep the hot path cheap; the documentation models live in :mod:`hearth.api.openai_schemas`.
"""

from __future__ import annotations

import orjson
from fastapi import Request
from starlette.responses import Response

from hearth.api.call_context import call_context, call_headers, public_reply
from hearth.api.chat_validation import validate_chat, validate_embeddings
from hearth.api.deps import (
    authenticate_caller,
    authenticated_body,
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
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.gateway.scenes import caller_may_see

router = api_router(prefix="/v1", tags=["openai"])

@router.post("/chat/completions", summary="Create a chat completion (stream or not)",
             openapi_extra=request_body(ChatCompletionRequest),
             responses={200: {"model": ChatCompletion, "content": {"text/event-stream": {}}}, **ERROR_RESPONSES})
async def chat_completions(request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_json_object(raw)
    validate_chat(body)
    gw = runtime(request).gateway
    ctx = call_context(request, caller, body, "chat", nonce=nonce)
    if body.get("stream"):
        # opened by the response, which sends keep-alives if the first event is slow (see event_stream)
        return EventStreamResponse.opening(gw.open_stream(ctx, body), lambda: call_headers(ctx),
                                           keepalive_s=runtime(request).settings.sse_keepalive_s)
    reply = await gw.complete(ctx, body)
    return Response(public_reply(gw.registry, ctx, reply.body), media_type="application/json",
                    headers=call_headers(ctx))


@router.post("/embeddings", summary="Create embeddings", openapi_extra=request_body(EmbeddingRequest),
             responses={200: {"model": EmbeddingResponse}, **ERROR_RESPONSES})
async def embeddings(request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_json_object(raw)
    validate_embeddings(body)
    ctx = call_context(request, caller, body, "embeddings", nonce=nonce)
    gw = runtime(request).gateway
    reply = await gw.embed(ctx, body)
    return Response(public_reply(gw.registry, ctx, reply.body), media_type="application/json",
                    headers=call_headers(ctx))


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

