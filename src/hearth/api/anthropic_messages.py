"""The Anthropic Messages door: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Anthropic's SDKs and Claude Code (``ANTHROPIC_BASE_URL`` pointed at Hearth) work unchanged. The door goes
through the same gateway core as ``/v1/chat/completions`` — admission, budgets, scenes, routing and
failover, the request log (route ``messages``) and usage events — by translating the request into the
core's chat body (:mod:`hearth.wire.anthropic_request`) and the answer back
(:mod:`hearth.wire.anthropic_reply`, :mod:`hearth.api.anthropic_stream`). An endpoint whose provider
is Anthropic gets the caller's request natively instead, as it was sent (the model name mapped), and
its answer comes back untranslated (:class:`~hearth.providers.anthropic.NativeMessages`).

Headers: the caller key is ``x-api-key`` or ``Authorization: Bearer`` (Claude Code's
``ANTHROPIC_AUTH_TOKEN``); ``anthropic-version`` is required and must be a version date;
``anthropic-beta`` goes to native Anthropic endpoints as it is and is not interpreted for translated
calls (a beta *feature* the translation cannot honour is refused by its request field, see
docs/anthropic.md). Errors are Anthropic's (:mod:`hearth.api.anthropic_errors`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime
from typing import Any, Final

import orjson
from fastapi import Request
from starlette.responses import Response

from hearth.api import openai
from hearth.api.anthropic_errors import upstream_refusal
from hearth.api.anthropic_schemas import (
    ERROR_RESPONSES,
    CountTokensRequest,
    Message,
    MessagesRequest,
    TokenCount,
)
from hearth.api.anthropic_stream import MessagesEventStream
from hearth.api.call_context import call_context, call_headers
from hearth.api.deps import authenticate_caller, authenticated_body, claim_nonce, runtime
from hearth.api.event_stream import EventStreamResponse
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_json_object
from hearth.api.route_defaults import api_router
from hearth.auth.internal import PendingNonce
from hearth.errors import HearthError, UpstreamHTTPError, UpstreamNetworkError
from hearth.gateway.context import CallContext
from hearth.gateway.model_name import shown_model
from hearth.gateway.scenes import caller_may_see
from hearth.gateway.service import Gateway
from hearth.observability.logging import get_logger
from hearth.providers.anthropic import AnthropicProvider, NativeMessages
from hearth.registry.snapshot import Caller, Endpoint, Model
from hearth.wire.anthropic_reply import ChunkEvents, chat_to_message
from hearth.wire.anthropic_request import NativeOnly, messages_to_chat
from hearth.wire.model_name import public_model_body
from hearth.wire.tokens import estimate_messages, estimate_text

router = api_router(prefix="/v1", tags=["anthropic"])
log = get_logger("hearth.api")

ROUTE: Final = "messages"  # the request log's and the metrics' route
FIRST_VERSION: Final = "2023-01-01"  # the oldest ``anthropic-version`` there is
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
COUNT_TIMEOUT_S: Final = 10.0


def api_version(request: Request) -> str:
    """The request's ``anthropic-version``: required, a date (YYYY-MM-DD), none before the first version.

    Any such version is accepted (SDKs move to new ones on their own schedule: the current SDK sends
    2026-10-21, older ones 2023-06-01): a translated call reads the body it was sent, whatever the
    version, and a native call sends the caller's version on, so the Anthropic endpoint decides."""
    version = request.headers.get("anthropic-version")
    if version is None:
        raise HearthError("invalid_request", "anthropic-version: header is required.", param="anthropic-version")
    try:
        valid = _DATE.fullmatch(version) is not None and date.fromisoformat(version) >= date.fromisoformat(
            FIRST_VERSION)
    except ValueError:
        valid = False
    if not valid:
        raise HearthError("invalid_request", f"anthropic-version: `{version[:40]}` is not a version (a date "
                          f"YYYY-MM-DD, {FIRST_VERSION} or later).", param="anthropic-version")
    return version


class KeyHeaders(Mapping[str, str]):
    """The request's headers with Anthropic's ``x-api-key`` read as the caller key, when there is no
    ``Authorization`` header (which Claude Code sends for ``ANTHROPIC_AUTH_TOKEN``, and which wins)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._headers = headers
        key = headers.get("x-api-key")
        self._authorization = f"Bearer {key}" if key and headers.get("authorization") is None else None

    def __getitem__(self, name: str) -> str:
        if name == "authorization" and self._authorization is not None:
            return self._authorization
        return self._headers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._headers)

    def __len__(self) -> int:
        return len(self._headers)


def _key_headers(request: Request) -> KeyHeaders:
    headers = KeyHeaders(request.headers)
    if headers.get("authorization") is None and headers.get("x-internal-token") is None:
        raise HearthError("invalid_api_key", "Missing API key: send `x-api-key: <key>` (or `Authorization: Bearer "
                          "<key>`).")
    return headers


async def _authenticated_body(request: Request) -> tuple[Caller, bytes, PendingNonce | None]:
    """:func:`hearth.api.deps.authenticated_body` with Anthropic's key header."""
    return await authenticated_body(request, _key_headers(request))


def _native(gw: Gateway, body: dict[str, Any], request: Request, *, version: str,
            needs: NativeOnly) -> NativeMessages | None:
    provider = gw.providers.get("anthropic")
    if not isinstance(provider, AnthropicProvider):
        if needs:
            raise _native_needed(needs)
        return None
    return NativeMessages(provider, body, version=version, beta=request.headers.get("anthropic-beta"),
                          required=bool(needs))


def _native_needed(needs: NativeOnly) -> HearthError:
    return HearthError("unsupported_feature", f"{', '.join(needs)}: only an Anthropic endpoint can serve this, and "
                       "the model has none.", param=needs[0])


def _told(exc: UpstreamHTTPError | HearthError, needs: NativeOnly) -> HearthError:
    """The core's error as this door tells it: an upstream's refusal with its status and message; "no
    native endpoint" naming the request's fields that need one."""
    if isinstance(exc, UpstreamHTTPError):
        return upstream_refusal(exc)
    if exc.code == "unsupported_feature" and exc.details.get("needs") == "native":
        return _native_needed(needs)
    return exc


def _served_natively(native: NativeMessages | None, ctx: CallContext) -> bool:
    return native is not None and ctx.endpoint is not None and native.serves(ctx.endpoint)


def _headers(ctx: CallContext) -> dict[str, str]:
    return {**call_headers(ctx), "request-id": ctx.request_id}


@router.post("/messages", summary="Create a message (Anthropic Messages API; stream or not)",
             openapi_extra=request_body(MessagesRequest),
             responses={200: {"model": Message, "content": {"text/event-stream": {}}}, **ERROR_RESPONSES})
async def messages(request: Request) -> Response:
    version = api_version(request)
    caller, raw, nonce = await _authenticated_body(request)
    body = parse_json_object(raw)
    needs = NativeOnly()
    chat = messages_to_chat(body, needs)
    gw = runtime(request).gateway
    native = _native(gw, body, request, version=version, needs=needs)
    ctx = call_context(request, caller, chat, ROUTE, nonce=nonce)
    if chat.get("stream"):
        opening = _open_stream(request, ctx, chat, native=native, needs=needs)
        return EventStreamResponse.opening(opening, lambda: _headers(ctx),
                                           keepalive_s=runtime(request).settings.sse_keepalive_s)
    try:
        reply = await gw.complete(ctx, chat, native=native)
    except (UpstreamHTTPError, HearthError) as exc:
        told = _told(exc, needs)
        if told is exc:
            raise
        raise told from exc
    public = shown_model(gw.registry, ctx.model, ctx.endpoint)
    if _served_natively(native, ctx):
        out = reply.body if public is None else public_model_body(reply.body, public)
    else:
        answer = orjson.loads(reply.body)
        model = public or str(answer.get("model") or "")
        out = orjson.dumps(chat_to_message(answer, message_id=f"msg_{ctx.request_id}", model=model))
    return Response(out, media_type="application/json", headers=_headers(ctx))


async def _open_stream(request: Request, ctx: CallContext, chat: dict[str, Any], *, native: NativeMessages | None,
                       needs: NativeOnly) -> MessagesEventStream:
    rt = runtime(request)
    gw = rt.gateway
    try:
        relay = await gw.open_stream(ctx, chat, native=native)
    except (UpstreamHTTPError, HearthError) as exc:
        told = _told(exc, needs)
        if told is exc:
            raise
        raise told from exc
    events = None
    if not _served_natively(native, ctx):
        public = shown_model(gw.registry, ctx.model, ctx.endpoint)
        upstream = ctx.endpoint.upstream_model if ctx.endpoint is not None else ""
        events = ChunkEvents(f"msg_{ctx.request_id}", public or upstream, estimate_messages(chat["messages"]))
    return MessagesEventStream(relay, events, rt.settings.max_sse_event_bytes)


@router.post("/messages/count_tokens", summary="Count the input tokens of a message request",
             openapi_extra=request_body(CountTokensRequest),
             responses={200: {"model": TokenCount}, **ERROR_RESPONSES})
async def count_tokens(request: Request) -> Response:
    """The count of an Anthropic endpoint of the model when it has one (it knows its tokenizer), else
    Hearth's own estimate (:mod:`hearth.wire.tokens`, the one admission uses). Not a model call: no
    admission, budget or request-log row; the model must be one the caller may use."""
    version = api_version(request)
    caller, raw, nonce = await _authenticated_body(request)
    await claim_nonce(request, nonce)
    body = parse_json_object(raw)
    chat = messages_to_chat({**body, "max_tokens": 1, "stream": False}, NativeOnly())
    gw = runtime(request).gateway
    model = gw.resolve_model(body.get("model"), "chat")
    if not caller_may_see(gw.registry, caller, model):
        raise HearthError("model_not_found", f"The model `{model.name}` does not exist or you do not have access "
                          "to it.", param="model")
    provider = gw.providers.get("anthropic")
    native = next((ep for ep in model.endpoints if ep.kind == "anthropic" and ep.enabled), None)
    tokens = None
    if isinstance(provider, AnthropicProvider) and native is not None:
        tokens = await _native_count(provider, native, body, version=version,
                                     beta=request.headers.get("anthropic-beta"))
    if tokens is None:
        tokens = estimate_messages(chat["messages"])
        if chat.get("tools"):
            tokens += estimate_text(orjson.dumps(chat["tools"]).decode())
    return Response(orjson.dumps({"input_tokens": tokens}), media_type="application/json")


async def _native_count(provider: AnthropicProvider, ep: Endpoint, body: dict[str, Any], *, version: str,
                        beta: str | None) -> int | None:
    """The endpoint's count; None (estimate instead) when it cannot answer now. Its refusal of the request
    itself (a 4xx other than 429) is the caller's answer."""
    try:
        return await provider.count_tokens(ep, body, min(ep.timeout_s, COUNT_TIMEOUT_S), version=version, beta=beta)
    except UpstreamHTTPError as exc:
        if 400 <= exc.status < 500 and exc.status not in (401, 403, 408, 409, 429):
            raise upstream_refusal(exc) from exc
        log.info("count_tokens_estimated", endpoint=ep.name, upstream_status=exc.status)
    except UpstreamNetworkError as exc:
        log.info("count_tokens_estimated", endpoint=ep.name, reason=str(exc))
    return None


def _model_info(model: Model, created_at: str) -> dict[str, Any]:
    return {"type": "model", "id": model.name, "display_name": model.description or model.name,
            "created_at": created_at, "lifecycle": "active"}


async def list_models(request: Request) -> Response:
    """``GET /v1/models`` in Anthropic's format when the request carries ``anthropic-version`` (the
    ``anthropic`` SDK's ``models.list``; one page: ``has_more`` false), else OpenAI's
    (:func:`hearth.api.openai.list_models`). The same models either way: those the caller may use."""
    if "anthropic-version" not in request.headers:
        return await openai.list_models(request)
    api_version(request)
    caller = await authenticate_caller(request, _key_headers(request))
    registry = runtime(request).gateway.registry
    created = datetime.fromtimestamp(registry.created_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    data = [_model_info(m, created) for m in sorted(registry.models.values(), key=lambda m: m.name)
            if m.kind == "chat" and caller_may_see(registry, caller, m)]
    return Response(orjson.dumps({"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                                  "last_id": data[-1]["id"] if data else None}), media_type="application/json")
