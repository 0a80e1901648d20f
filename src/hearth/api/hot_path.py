"""The hot path: the OpenAI routes served straight from ASGI, in front of the FastAPI app.

FastAPI's per-request machinery (middleware stack, router, dependency solving, exception
middleware) cost about a third of the gateway's CPU per call in profiles. The OpenAI routes need
none of it: they parse their own bodies and render their own errors. So this dispatcher calls the
very same handler functions from :mod:`hearth.api.openai` directly and hands every other request
(and lifespan) to FastAPI, which still owns those routes' OpenAPI documentation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hearth.api import openai
from hearth.api.error_handlers import relayed_error, render_error
from hearth.errors import HearthError, UpstreamHTTPError
from hearth.observability.logging import get_logger

log = get_logger("hearth.api")

Handler = Callable[[Request], Awaitable[Response]]


class HotPathApp:
    def __init__(self, api: FastAPI) -> None:
        self.api = api
        self.routes: dict[tuple[str, str], Handler] = {
            ("POST", "/v1/chat/completions"): openai.chat_completions,
            ("POST", "/v1/embeddings"): openai.embeddings,
            ("GET", "/v1/models"): openai.list_models,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.routes.get((scope.get("method", ""), scope.get("path", ""))) if scope["type"] == "http" else None
        if handler is None:
            await self.api(scope, receive, send)
            return
        scope["app"] = self.api
        request = Request(scope, receive)
        try:
            response = await handler(request)
        except HearthError as exc:
            response = render_error(request, exc)
        except UpstreamHTTPError as exc:
            response = relayed_error(exc)
        except Exception as exc:
            log.error("unhandled_error", error=type(exc).__name__, path=scope["path"], exc_info=exc)
            response = render_error(request, HearthError("internal_error"))
        await response(scope, receive, send)
