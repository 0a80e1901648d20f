"""The Responses API and legacy completions: ``/v1/responses`` (create, retrieve, delete) and ``/v1/completions``.

Routers only: authenticate, parse, hand the call to :mod:`hearth.responses` (which goes through the same
gateway core as ``/v1/chat/completions``), render. Errors are OpenAI's error object (every ``/v1`` route
renders them so). Each door has its own ``route`` in the request log and metrics: ``responses`` and
``completions``. The two POST routes are also dispatched in front of FastAPI
(:mod:`hearth.api.direct_routes`), like the chat route, so a client that leaves is noticed at once.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from hearth.api.call_context import call_context, call_headers, public_reply
from hearth.api.chat_validation import validate_chat
from hearth.api.deps import authenticate_caller, authenticated_body, runtime
from hearth.api.event_stream import EventStreamResponse, FrameSource
from hearth.api.openai_schemas import ERROR_RESPONSES, request_body
from hearth.api.request_body import parse_json_object
from hearth.api.responses_schemas import (
    CompletionRequest,
    ResponseCreateRequest,
    ResponseDeleted,
    ResponseObject,
    TextCompletion,
)
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.gateway.context import CallContext
from hearth.responses.completions import CompletionStream, completion_chat_body, text_completion
from hearth.responses.requests import ResponsesRequest, parse_responses_request, responses_param
from hearth.responses.service import ResponsesService

router = api_router(prefix="/v1", tags=["openai"])

_STREAM_OR_JSON: dict[str, Any] = {"content": {"text/event-stream": {}}}


def _service(request: Request) -> ResponsesService:
    rt = runtime(request)
    return ResponsesService(rt.engine, rt.gateway, retention_s=rt.settings.responses_retention_s)


def _checked(parsed: ResponsesRequest) -> ResponsesRequest:
    """The chat route's own checks over the translated body, its ``param`` named as the Responses API names it."""
    try:
        validate_chat(parsed.chat_body([]))
    except HearthError as exc:
        exc.param = responses_param(exc.param)
        raise
    return parsed


def _json(value: object, ctx: CallContext | None = None) -> Response:
    return Response(orjson.dumps(value), media_type="application/json",
                    headers=call_headers(ctx) if ctx is not None else None)


def _stream(request: Request, ctx: CallContext, opening: Awaitable[FrameSource]) -> Response:
    return EventStreamResponse.opening(opening, lambda: call_headers(ctx),
                                       keepalive_s=runtime(request).settings.sse_keepalive_s)


@router.post("/responses", summary="Create a model response (Responses API; stream or not)",
             openapi_extra=request_body(ResponseCreateRequest),
             responses={200: {"model": ResponseObject, **_STREAM_OR_JSON}, **ERROR_RESPONSES})
async def create_response(request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_json_object(raw)
    parsed = _checked(parse_responses_request(body))
    service = _service(request)
    history = await service.history(caller.name, parsed)
    ctx = call_context(request, caller, body, "responses", nonce=nonce)
    if parsed.stream:
        return _stream(request, ctx, service.open_stream(ctx, parsed, history))
    return _json(await service.create(ctx, parsed, history), ctx)


@router.get("/responses/{response_id}", summary="Retrieve a stored response of this caller",
            responses={200: {"model": ResponseObject}, **ERROR_RESPONSES})
async def retrieve_response(response_id: str, request: Request) -> Response:
    caller = await authenticate_caller(request)
    return _json(await _service(request).retrieve(caller.name, response_id))


@router.delete("/responses/{response_id}", summary="Delete a stored response of this caller",
               responses={200: {"model": ResponseDeleted}, **ERROR_RESPONSES})
async def delete_response(response_id: str, request: Request) -> Response:
    caller = await authenticate_caller(request)
    return _json(await _service(request).delete(caller.name, response_id))


@router.post("/completions", summary="Create a completion (legacy; answered by a chat model)",
             openapi_extra=request_body(CompletionRequest),
             responses={200: {"model": TextCompletion, **_STREAM_OR_JSON}, **ERROR_RESPONSES})
async def completions(request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_json_object(raw)
    chat = completion_chat_body(body)
    validate_chat(chat)
    gw = runtime(request).gateway
    ctx = call_context(request, caller, body, "completions", nonce=nonce)
    if chat.get("stream"):
        async def opening() -> FrameSource:
            return CompletionStream(await gw.open_stream(ctx, chat))

        return _stream(request, ctx, opening())
    reply = await gw.complete(ctx, chat)
    return _json(text_completion(orjson.loads(public_reply(gw.registry, ctx, reply.body))), ctx)
