"""JSON-RPC 2.0 and MCP protocol checks for ``/mcp`` (seed 004 §5, step 2), and the shape of its errors.

Hearth's virtual MCP server speaks the Streamable HTTP transport in the ``initialize`` handshake era
(protocol versions :data:`SUPPORTED_VERSIONS`), answering every request with one JSON body. It issues no
``Mcp-Session-Id``: each message is authenticated and authorized on its own, so any Hearth process can
answer any message. Batches (JSON arrays) are refused: the 2025-06-18 revision removed them.

Errors are JSON-RPC error objects. ``error.data.code`` carries Hearth's stable catalog code
(:mod:`hearth.errors`) and ``error.data.request_id`` the request id; the HTTP status is the catalog's
(400 for a message Hearth cannot accept, 401 unauthenticated, 403 denied, 429 limited, …).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from hearth.errors import HearthError

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
LATEST_VERSION = SUPPORTED_VERSIONS[0]
ASSUMED_VERSION = "2025-03-26"  # a request without MCP-Protocol-Version (the transport's rule)
VERSION_HEADER = "mcp-protocol-version"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# server-defined codes (-32000..-32099) for Hearth's own refusals
UNAUTHENTICATED = -32001
NO_TOOLS = -32002
FORBIDDEN = -32003
UPSTREAM_FAILED = -32010
RATE_LIMITED = -32029

_RPC_CODES = {
    "invalid_json": PARSE_ERROR,
    "invalid_request": INVALID_REQUEST,
    "request_too_large": INVALID_REQUEST,
    "mcp_protocol_version_unsupported": INVALID_REQUEST,
    "mcp_method_not_found": METHOD_NOT_FOUND,
    "mcp_tool_not_found": INVALID_PARAMS,
    "mcp_no_tools": NO_TOOLS,
    "mcp_upstream_error": UPSTREAM_FAILED,
}
_BY_STATUS = {401: UNAUTHENTICATED, 403: FORBIDDEN, 429: RATE_LIMITED}

RequestId = str | int


@dataclass(slots=True, frozen=True)
class Message:
    """A client message: a request (``id`` set), a notification (``method``, no ``id``) or a response."""

    kind: str  # request | notification | response
    id: RequestId | None
    method: str
    params: dict[str, Any]


class RpcError(Exception):
    """A JSON-RPC error to answer with: its code and message, Hearth's catalog code, the HTTP status."""

    def __init__(self, rpc_code: int, message: str, *, hearth_code: str, status: int,
                 headers: dict[str, str] | None = None, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code
        self.message = message
        self.hearth_code = hearth_code
        self.status = status
        self.headers = headers or {}
        self.data = data or {}

    @classmethod
    def from_hearth(cls, exc: HearthError) -> RpcError:
        code = _RPC_CODES.get(exc.code) or _BY_STATUS.get(exc.status) or (
            INVALID_REQUEST if exc.status < 500 else INTERNAL_ERROR)
        data = {k: v for k, v in exc.details.items() if k != "code"}
        return cls(code, exc.message, hearth_code=exc.code, status=exc.status, headers=exc.headers(),
                   data=data)

    def body(self, message_id: RequestId | None, request_id: str) -> bytes:
        data = {**self.data, "code": self.hearth_code, "request_id": request_id}
        return orjson.dumps({"jsonrpc": "2.0", "id": message_id,
                             "error": {"code": self.rpc_code, "message": self.message, "data": data}})


def _invalid(message: str) -> HearthError:
    return HearthError("invalid_request", message)


def _is_id(value: Any) -> bool:
    return (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)))


def parse_message(raw: bytes) -> Message:
    """One JSON-RPC 2.0 message, or :class:`HearthError` (``invalid_json`` → -32700, ``invalid_request`` →
    -32600) saying what is wrong with it."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise HearthError("invalid_json", "The body is not valid JSON.") from None
    if isinstance(obj, list):
        raise _invalid("JSON-RPC batches are not supported: send one message per request.")
    if not isinstance(obj, dict):
        raise _invalid("A JSON-RPC message is a JSON object.")
    if obj.get("jsonrpc") != "2.0":
        raise _invalid('`jsonrpc` must be "2.0".')
    has_id = "id" in obj
    if has_id and not _is_id(obj["id"]):
        raise _invalid("`id` must be a string or an integer.")
    if "method" not in obj:
        if has_id and ("result" in obj) != ("error" in obj):
            return Message("response", obj["id"], "", {})
        raise _invalid("A JSON-RPC message needs a `method` (or is a response with `result` or `error`).")
    method = obj["method"]
    if not isinstance(method, str) or not method:
        raise _invalid("`method` must be a non-empty string.")
    params = obj.get("params", {})
    if not isinstance(params, dict):
        raise _invalid("`params` must be an object.")
    return Message("request" if has_id else "notification", obj["id"] if has_id else None, method, params)


def check_version_header(value: str | None) -> str:
    """The protocol version a (non-initialize) request says it speaks; unsupported → 400."""
    version = value or ASSUMED_VERSION
    if version not in SUPPORTED_VERSIONS:
        raise HearthError("mcp_protocol_version_unsupported",
                          f"MCP-Protocol-Version {version[:40]!r} is not supported; Hearth speaks "
                          f"{', '.join(SUPPORTED_VERSIONS)}.", details={"supported": list(SUPPORTED_VERSIONS)})
    return version


def negotiate(params: dict[str, Any]) -> str:
    """``initialize``: the client's version if Hearth speaks it, else Hearth's latest (the client decides)."""
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise HearthError("invalid_request", "initialize needs `params.protocolVersion` (a string).",
                          param="protocolVersion")
    return requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION


def result_body(message_id: RequestId | None, result: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": message_id, "result": result})
