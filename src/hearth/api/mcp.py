"""``/mcp``: Hearth's virtual MCP server over Streamable HTTP (docs/mcp.md).

Every message goes through the four steps of seed 004 §5, in order: (1) authenticate the caller (a
Hearth caller key, signed requests as on the other routes); (2) validate the JSON-RPC message, its
headers and the protocol version (:mod:`hearth.mcp.protocol`); (3) authorize and (4) re-forward, in
:class:`hearth.mcp.gateway.McpGateway`. Answers are single JSON bodies; errors are JSON-RPC error objects
with Hearth's catalog code in ``error.data.code`` and the catalog's HTTP status.

``GET`` (a server-to-client SSE stream) and ``DELETE`` (end a session) answer 405: Hearth sends nothing
unasked and issues no session to end.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.responses import Response

from hearth import __version__
from hearth.api.deps import authenticated_body, claim_nonce, request_id, runtime
from hearth.api.route_defaults import api_router
from hearth.auth.internal import PendingNonce
from hearth.errors import HearthError
from hearth.mcp.gateway import McpGateway
from hearth.mcp.protocol import (
    VERSION_HEADER,
    Message,
    RpcError,
    check_version_header,
    negotiate,
    parse_message,
    result_body,
)
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Caller

log = get_logger("hearth.api.mcp")

router = api_router(tags=["mcp"])

_JSON = "application/json"
_INSTRUCTIONS = ("Tools of several MCP servers, named <server>__<tool>; Hearth authorizes every call and "
                 "forwards it with its own credentials.")


def _answer(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type=_JSON, headers=headers)


@router.post("/mcp", summary="MCP (Streamable HTTP): one JSON-RPC message per request",
             response_class=Response)
async def post_message(request: Request) -> Response:
    rid = request_id(request)
    message_id: Any = None
    try:
        caller, raw, pending = await authenticated_body(request)  # 1. authenticate
        content_type = request.headers.get("content-type", _JSON).split(";", 1)[0].strip().lower()
        if content_type != _JSON:
            raise HearthError("invalid_request", "Content-Type must be application/json.")
        message = parse_message(raw)  # 2. validate
        message_id = message.id
        if message.method != "initialize":
            check_version_header(request.headers.get(VERSION_HEADER))
        gateway = _gateway(request)
        await gateway.refresh(runtime(request).gateway.registry.version)
        if message.kind == "request" and message.method == "tools/call":
            result = await _call_tool(gateway, caller, message, rid=rid, pending=pending)  # 3. authorize, 4. forward
        else:
            await claim_nonce(request, pending)
            if message.kind != "request":  # a notification, or the answer to a request Hearth never sends
                return Response(status_code=202)
            result = await _handle(gateway, caller, message)
        return _answer(result_body(message_id, result))
    except HearthError as exc:
        error = RpcError.from_hearth(exc)
    except RpcError as exc:
        error = exc
    except Exception as exc:  # answered in the protocol's own format all the same
        log.error("mcp_unhandled_error", error=type(exc).__name__, exc_info=exc)
        error = RpcError.from_hearth(HearthError("internal_error"))
    return _answer(error.body(message_id, rid), error.status, error.headers)


async def _call_tool(gateway: McpGateway, caller: Caller, message: Message, *, rid: str,
                     pending: PendingNonce | None) -> dict[str, Any]:
    name = message.params.get("name")
    arguments = message.params.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise HearthError("invalid_request", "tools/call needs `params.name` (a string).", param="name")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise HearthError("invalid_request", "`params.arguments` must be an object.", param="arguments")
    return await gateway.call_tool(caller, name, arguments, request_id=rid, nonce=pending)


async def _handle(gateway: McpGateway, caller: Caller, message: Message) -> dict[str, Any]:
    if message.method == "initialize":
        return {"protocolVersion": negotiate(message.params), "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "hearth", "version": __version__}, "instructions": _INSTRUCTIONS}
    if message.method == "ping":
        return {}
    if message.method == "tools/list":
        return {"tools": await gateway.list_tools(caller)}
    raise HearthError("mcp_method_not_found", f"Hearth's MCP server has no method {message.method[:100]!r} (it "
                      "offers initialize, ping, tools/list and tools/call).")


def _gateway(request: Request) -> McpGateway:
    gateway = runtime(request).mcp
    if gateway is None:
        raise HearthError("mcp_no_tools", "The MCP gateway is not running in this process.")
    return gateway


@router.get("/mcp", summary="MCP: no server-to-client stream (405)", response_class=Response)
@router.delete("/mcp", summary="MCP: no session to end (405)", response_class=Response)
async def not_offered(request: Request) -> Response:
    return Response(status_code=405, headers={"Allow": "POST"})
