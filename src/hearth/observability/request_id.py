"""ASGI middleware: accept a sane ``X-Request-Id`` or make one, echo it, bind it to every log line.

A caller's id is kept only if it fits the ``request_logs.request_id`` column (at most 64 characters
of ``A-Z a-z 0-9 . _ : -``); any other value — too long, empty, other characters — is replaced by a
fresh id (never stored cut, which would make it a different caller's id), so the request is logged
like any other and cannot cost the other rows of its batch.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hearth.ids import new_id
from hearth.observability.logging import request_id_var

MAX_REQUEST_ID = 64  # the length of request_logs.request_id (a test checks they agree)
_VALID = re.compile(rb"[A-Za-z0-9._:\-]{1,%d}" % MAX_REQUEST_ID)


def new_request_id() -> str:
    return new_id()


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid: str | None = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                if _VALID.fullmatch(value):
                    rid = value.decode()
                break
        if rid is None:
            rid = new_request_id()
        scope.setdefault("state", {})["request_id"] = rid
        token = request_id_var.set(rid)
        raw = rid.encode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers: list[Any] = list(message.get("headers", []))
                headers.append((b"x-request-id", raw))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)


def valid_request_id(value: str | None) -> str:
    """``value`` if it is a request id Hearth keeps (the rule above), else a fresh one: for doors that are not
    ASGI (the gRPC server reads ``x-request-id`` from its metadata)."""
    if value is not None and _VALID.fullmatch(value.encode()):
        return value
    return new_request_id()
