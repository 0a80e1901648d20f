"""Rendering errors: OpenAI's error object on ``/v1/*``, Hearth's envelope everywhere else."""

from __future__ import annotations

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from hearth.api.anthropic_errors import anthropic_error_response, speaks_anthropic
from hearth.api.deps import request_id
from hearth.errors import HearthError, UpstreamHTTPError
from hearth.observability.logging import get_logger

log = get_logger("hearth.api")
NO_RETRY = {"x-should-retry": "false"}


def _is_openai_route(request: Request) -> bool:
    return request.url.path.startswith("/v1/")


def render_error(request: Request, exc: HearthError) -> Response:
    """The error answer, with ``x-should-retry`` (and ``Retry-After``/``retry-after-ms`` when the
    wait is known): the official SDKs obey it, so a call Hearth already failed over is not re-sent."""
    if speaks_anthropic(request.url.path, request.headers):  # the Messages door answers in Anthropic's format
        return anthropic_error_response(exc, request_id(request))
    body = exc.openai_body() if _is_openai_route(request) else exc.envelope(request_id(request))
    return Response(orjson.dumps(body), status_code=exc.status, media_type="application/json",
                    headers=exc.headers())


def relayed_error(exc: UpstreamHTTPError) -> Response:
    """A caller mistake the upstream caught (e.g. 400 context too long): returned as is, and marked
    not worth retrying (the same request would be refused again)."""
    return Response(orjson.dumps(exc.body), status_code=exc.status, media_type="application/json",
                    headers=NO_RETRY)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HearthError)
    async def _hearth(request: Request, exc: HearthError) -> Response:
        return render_error(request, exc)

    @app.exception_handler(UpstreamHTTPError)
    async def _relayed(request: Request, exc: UpstreamHTTPError) -> Response:
        return relayed_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        problems = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        first = problems[0] if problems else {"loc": [], "msg": "invalid"}
        err = HearthError("invalid_request", f"{'.'.join(map(str, first['loc']))}: {first['msg']}",
                          details={"errors": problems})
        return render_error(request, err)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "invalid_request"}.get(exc.status_code, "invalid_request")
        return render_error(request, HearthError(code, str(exc.detail), status=exc.status_code))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.error("unhandled_error", error=type(exc).__name__, path=request.url.path, exc_info=exc)
        return render_error(request, HearthError("internal_error"))
