"""The chat playground: a page whose script speaks the capability chat's SSE protocol (seed 001 §8), and the
route it talks to.

The browser never holds a caller key: ``POST /console/playground/chat`` runs the same streaming chat as
``POST /api/v1/ai/chat`` as the configured ``console_playground_caller`` (whose scenes, limits and budgets
apply), with the signed-in console user as the end user. The route needs the operator role, this session's
CSRF token in ``X-CSRF-Token`` and a same-origin request. The browser's ``request_id`` makes the call
idempotent; the script makes a new one only when a person presses Retry, never by itself.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.ai_schemas import ChatRequest
from hearth.api.deps import client_ip, read_json_object, request_id, runtime
from hearth.api.event_stream import EventStreamResponse
from hearth.api.request_body import parse_model
from hearth.capabilities.chat import ChatOptions, chat_key, chat_stream
from hearth.capabilities.requests import call_from_body
from hearth.capabilities.service import Capabilities
from hearth.console import session as sessions
from hearth.console.auth import ConsoleRefused, require, same_origin
from hearth.console.render import page
from hearth.errors import HearthError

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)


@router.get("/playground", include_in_schema=False)
async def playground(request: Request) -> Response:
    console = await require(request)
    rt = runtime(request)
    models = sorted(name for name, m in rt.gateway.registry.models.items() if m.enabled and m.kind == "chat")
    return page(request, "playground.html", console, caller=rt.settings.console_playground_caller, models=models,
                can_chat=console.can("operator"))


@router.post("/playground/chat", include_in_schema=False)
async def chat(request: Request) -> Response:
    console = await require(request, "operator")
    if not same_origin(request) or not sessions.token_matches(console.csrf, request.headers.get("x-csrf-token")):
        raise ConsoleRefused(403, "Refused: the CSRF token is missing or not this session's.")
    rt = runtime(request)
    name = rt.settings.console_playground_caller
    caller = rt.gateway.registry.callers_by_name.get(name) if name else None
    if caller is None:
        raise HearthError("forbidden", "The playground is off: set HEARTH_CONSOLE_PLAYGROUND_CALLER to a caller.")
    body = parse_model(ChatRequest, await read_json_object(request), "request")
    body.stream = True
    call = call_from_body("chat", body, caller=caller, request_id=request_id(request), snapshot=rt.prompts.snapshot,
                          user=console.user, client_ip=client_ip(request))
    s = rt.settings
    options = ChatOptions(engine=rt.engine, runs=rt.chat_runs, heartbeat_s=s.sse_heartbeat_s, keep_s=s.chat_keep_s,
                          wait_s=s.request_timeout_s + 30)
    service = Capabilities(rt.gateway, offline_fallback=s.offline_fallback)
    stream = await chat_stream(service, call, rt.prompts.snapshot, key=chat_key(call, body.request_id),
                               last_event_id=0, options=options)
    return EventStreamResponse(stream)
