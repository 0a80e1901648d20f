"""ASGI middleware: accept a sane ``X-Request-Id`` or make one, echo it, bind it to every log line."""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hearth.ids import new_id
from hearth.observability.logging import request_id_var

_VALID = re.compile(rb"^[A-Za-z0-9._:\-]{1,128}$")


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
                if _VALID.match(value):
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
