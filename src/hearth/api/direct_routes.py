"""The hot routes dispatched straight from ASGI, in front of the FastAPI app: the OpenAI routes and the
capability API.

FastAPI's per-request machinery (middleware stack, router, dependency solving, exception
middleware) cost about a third of the gateway's CPU per call in profiles — and its router matches
paths one route at a time, ~100 µs per capability call with this app's routes. These routes need
none of it: they parse their own bodies and render their own errors (the OpenAI format on ``/v1``,
the envelope elsewhere). So this dispatcher calls the very same handler functions from
:mod:`hearth.api.openai` and :mod:`hearth.api.ai` directly and hands every other request (and
lifespan) to FastAPI, which still owns those routes' OpenAPI documentation. The Anthropic Messages door
(:mod:`hearth.api.anthropic_messages`) is dispatched the same way; it also answers ``GET /v1/models``,
handing OpenAI clients to :func:`hearth.api.openai.list_models`.

A POST handler is watched for its client leaving (:class:`~hearth.api.client_watch.ClientWatch`):
once the body is read, a disconnect cancels the handler at once, wherever it is — waiting for a
slot, for a non-stream answer, or for a stream's first event — so the gateway closes the upstream
request and releases the call's leases within moments, instead of finishing work nobody reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hearth.api import ai, anthropic_messages, images, mcp, openai, responses
from hearth.api.client_watch import ClientWatch, DelayedWatches
from hearth.api.error_handlers import relayed_error, render_error
from hearth.errors import HearthError, UpstreamHTTPError
from hearth.observability.logging import get_logger

log = get_logger("hearth.api")

Handler = Callable[[Request], Awaitable[Response]]


class DirectRoutes:
    def __init__(self, api: FastAPI) -> None:
        self.api = api
        self.routes: dict[tuple[str, str], Handler] = {
            ("POST", "/v1/chat/completions"): openai.chat_completions,
            ("POST", "/v1/embeddings"): openai.embeddings,
            ("GET", "/v1/models"): anthropic_messages.list_models,  # OpenAI's list, or Anthropic's for its clients
            ("POST", "/api/v1/ai/summarize"): ai.summarize,
            ("POST", "/api/v1/ai/extract"): ai.extract,
            ("POST", "/api/v1/ai/extract/bill"): ai.extract_bill,
            ("POST", "/api/v1/ai/text/generate"): ai.text_generate,
            ("POST", "/api/v1/ai/chat"): ai.chat,
            ("POST", "/v1/images/generations"): images.generations,
            ("POST", "/mcp"): mcp.post_message,
            ("POST", "/v1/messages"): anthropic_messages.messages,
            ("POST", "/v1/messages/count_tokens"): anthropic_messages.count_tokens,
            ("POST", "/v1/responses"): responses.create_response,
            ("POST", "/v1/completions"): responses.completions,
        }
        self.delayed_watches = DelayedWatches()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.routes.get((scope.get("method", ""), scope.get("path", ""))) if scope["type"] == "http" else None
        if handler is None:
            await self.api(scope, receive, send)
            return
        scope["app"] = self.api
        watch: ClientWatch | None = None
        owner = asyncio.current_task()
        if scope["method"] == "POST" and owner is not None:
            watch = ClientWatch(receive, owner.cancel, self.delayed_watches)
            receive = watch.receive
        request = Request(scope, receive)
        try:
            try:
                response = await handler(request)
            finally:
                if watch is not None:
                    watch.on_disconnect(None)  # from here on, the response watches for itself
        except asyncio.CancelledError:
            if watch is None or not watch.left:
                raise
            assert owner is not None
            owner.uncancel()  # the cancellation was ours: the client left, nothing is left to answer
            watch.close()
            log.debug("client_left_before_the_answer", path=scope["path"])
            return
        except ClientDisconnect:  # gone while sending its body: nobody to answer
            log.debug("client_left_while_sending", path=scope["path"])
            return
        except HearthError as exc:
            response = render_error(request, exc)
        except UpstreamHTTPError as exc:
            response = relayed_error(exc)
        except Exception as exc:
            log.error("unhandled_error", error=type(exc).__name__, path=scope["path"], exc_info=exc)
            response = render_error(request, HearthError("internal_error"))
        if watch is None:
            await response(scope, receive, send)
            return
        if watch.left and owner is not None and owner.cancelling():
            owner.uncancel()  # the handler absorbed our cancellation and answered anyway (maybe a stream to close)
        try:
            await response(scope, receive, send)
        finally:
            watch.close()
