"""The capability API (seed 000): ``/api/v1/ai/summarize``, ``/extract``, ``/extract/bill``, ``/text/generate``
and ``/chat``, answering with the envelope ``{success, data, error, request_id}``.

Callers authenticate as on ``/v1`` (key or shared token, signatures when required); the call runs in the
caller's governance — scenes, limits, budgets — through :class:`hearth.capabilities.service.Capabilities`.
This module parses and checks the body, resolves the input text (:mod:`hearth.capabilities.sources`) and
renders the result; nothing else.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from starlette.responses import Response

from hearth.api.ai_schemas import (
    AI_ERROR_RESPONSES,
    BillRequest,
    CapabilityEnvelope,
    CapabilityRequest,
    ChatRequest,
    ExtractRequest,
    GenerateRequest,
    SummarizeRequest,
)
from hearth.api.call_limits import caller_timeout_s
from hearth.api.deps import authenticated_body, client_ip, request_id, runtime
from hearth.api.envelope import ok
from hearth.api.event_stream import EventStreamResponse, last_event_id
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_json_object, parse_model
from hearth.api.route_defaults import api_router
from hearth.capabilities.chat import ChatOptions, chat_key, chat_once, chat_stream
from hearth.capabilities.requests import call_from_body
from hearth.capabilities.service import Capabilities, CapabilityCall
from hearth.capabilities.sources import SourceLimits, read_input

B = TypeVar("B", bound=CapabilityRequest)
router = api_router(prefix="/api/v1/ai", tags=["capabilities"], responses=AI_ERROR_RESPONSES)
_OK: dict[int | str, dict[str, Any]] = {200: {"model": CapabilityEnvelope}}


def _limits(request: Request) -> SourceLimits:
    s = runtime(request).settings
    return SourceLimits(file_root=s.file_root, max_bytes=s.file_max_bytes, timeout_s=s.file_url_timeout_s,
                        url_allow=tuple(s.file_url_allow))


async def _request(request: Request, model: type[B], capability: str) -> tuple[B, CapabilityCall, dict[str, Any]]:
    """Authenticate, read and check the body as ``model``: (the body, the call it describes, the raw object)."""
    caller, raw_bytes, nonce = await authenticated_body(request)
    raw = parse_json_object(raw_bytes)
    body = parse_model(model, raw, "request")
    call = call_from_body(capability, body, caller=caller, request_id=request_id(request),
                          snapshot=runtime(request).prompts.snapshot, tenant=request.headers.get("x-hearth-tenant"),
                          user=request.headers.get("x-hearth-user"), scene=request.headers.get("x-hearth-scene"),
                          client_ip=client_ip(request), nonce=nonce, timeout_s=caller_timeout_s(request.headers))
    return body, call, raw


async def _run(request: Request, call: CapabilityCall) -> Response:
    rt = runtime(request)
    service = Capabilities(rt.gateway, offline_fallback=rt.settings.offline_fallback)
    result = await service.run(call, rt.prompts.snapshot)
    return ok(request, result.data)


async def _with_input(request: Request, call: CapabilityCall, raw: dict[str, Any]) -> CapabilityCall:
    source = await read_input(raw, _limits(request), session=runtime(request).session)
    call.text, call.source = source.text, source.source
    return call


@router.post("/summarize", summary="Summarize a text, a file or a URL's text", responses=_OK,
             openapi_extra=request_body(SummarizeRequest))
async def summarize(request: Request) -> Response:
    _, call, raw = await _request(request, SummarizeRequest, "summarize")
    return await _run(request, await _with_input(request, call, raw))


@router.post("/extract", summary="Extract a JSON document matching a schema (inline or `schema_code`)",
             responses=_OK, openapi_extra=request_body(ExtractRequest))
async def extract(request: Request) -> Response:
    _, call, raw = await _request(request, ExtractRequest, "extract")
    return await _run(request, await _with_input(request, call, raw))


@router.post("/extract/bill", summary="Extract a bill (invoice or receipt) with the built-in schema and rules",
             responses=_OK, openapi_extra=request_body(BillRequest))
async def extract_bill(request: Request) -> Response:
    _, call, raw = await _request(request, BillRequest, "extract_bill")
    return await _run(request, await _with_input(request, call, raw))


@router.post("/text/generate", summary="Generate text from a prompt (or a role's prompt) and variables",
             responses=_OK, openapi_extra=request_body(GenerateRequest))
async def text_generate(request: Request) -> Response:
    _, call, _ = await _request(request, GenerateRequest, "generate")
    return await _run(request, call)


@router.post("/chat", summary="Chat with a role (its persona and model) or the default assistant; `stream: true` "
             "answers with SSE events message / heartbeat / busy / error / done",
             openapi_extra=request_body(ChatRequest),
             responses={200: {"model": CapabilityEnvelope, "content": {"text/event-stream": {}}}})
async def chat(request: Request) -> Response:
    body, call, _ = await _request(request, ChatRequest, "chat")
    rt = runtime(request)
    s = rt.settings
    options = ChatOptions(engine=rt.engine, runs=rt.chat_runs, heartbeat_s=s.sse_heartbeat_s, keep_s=s.chat_keep_s,
                          wait_s=s.request_timeout_s + 30)
    service = Capabilities(rt.gateway, offline_fallback=s.offline_fallback)
    key = chat_key(call, body.request_id)
    if not body.stream:
        result = await chat_once(service, call, rt.prompts.snapshot, key=key, options=options)
        return ok(request, result.data)
    stream = await chat_stream(service, call, rt.prompts.snapshot, key=key,
                               last_event_id=last_event_id(request), options=options)
    return EventStreamResponse(stream)
