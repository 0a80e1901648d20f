"""Errors on the Anthropic Messages door, in Anthropic's format.

``/v1/messages`` and ``/v1/messages/count_tokens`` answer errors as Anthropic does —
``{"type": "error", "error": {"type": "invalid_request_error", "message": "…"}}`` with Anthropic's error
type for the status — plus Hearth's stable ``code`` inside ``error`` and the ``request_id`` beside it
(extra keys the SDKs ignore), and the same ``x-should-retry`` / ``Retry-After`` headers as every route.
:func:`hearth.api.error_handlers.render_error` sends every error under these paths here, so errors
raised before the handler (an oversized body, an unknown method) look the same; and those of
``GET /v1/models`` when an Anthropic client (``anthropic-version``) asks.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response

from hearth.errors import HearthError, UpstreamHTTPError
from hearth.wire.anthropic_reply import error_event, error_payload

MESSAGES_PATH = "/v1/messages"


def is_anthropic_path(path: str) -> bool:
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def speaks_anthropic(path: str, headers: Mapping[str, str]) -> bool:
    """An answer in Anthropic's format: the Messages door, or ``/v1/models`` asked by an Anthropic client."""
    return is_anthropic_path(path) or (path == "/v1/models" and "anthropic-version" in headers)


def anthropic_error_response(exc: HearthError, request_id: str | None) -> Response:
    body = error_payload(exc.code, exc.message, status=exc.status, request_id=request_id)
    headers = exc.headers()
    if request_id:
        headers["request-id"] = request_id  # where Anthropic's SDKs read it from
    return Response(orjson.dumps(body), status_code=exc.status, media_type="application/json", headers=headers)


def anthropic_error_frame(exc: HearthError) -> bytes:
    """The error as an SSE ``error`` event, for a stream that had started (keep-alives) before it failed."""
    return error_event(exc.code, exc.message, status=exc.status)


def upstream_refusal(exc: UpstreamHTTPError) -> HearthError:
    """An upstream's refusal of the caller's request (a 4xx the gateway does not retry), told with the
    upstream's status and message: the request would be refused again, so ``x-should-retry: false``."""
    error = exc.body.get("error") if isinstance(exc.body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    refusal = HearthError("upstream_bad_request", message if isinstance(message, str) and message else None,
                          status=exc.status)
    refusal.retryable = False
    return refusal
