"""Hearth's errors as gRPC statuses: the status code, a message, and the stable Hearth code in trailers.

The HTTP status of a catalog code (:data:`hearth.errors.CATALOG`) decides the gRPC status, so every code —
those added later too — has one (:data:`BY_STATUS`; 422, an answer that failed its schema, moderation or
quality gate, is ``FAILED_PRECONDITION``). The trailing metadata carries what HTTP callers read from the
body and headers:

* ``hearth-error-code`` — the stable code (``budget_exhausted``, ``invalid_api_key``, …);
* ``hearth-error-param`` — the request field at fault, when known;
* ``x-should-retry`` — ``true`` / ``false``, as on HTTP (``false`` once Hearth failed over itself);
* ``retry-after-ms`` — the wait before a retry can succeed, when known;
* ``x-request-id`` — the request's id (its request-log row).

docs/grpc.md prints the table; a test checks it against :func:`grpc_status`.
"""

from __future__ import annotations

from typing import Any

import grpc

from hearth.errors import CATALOG, HearthError, UpstreamHTTPError, retry_after_headers

BY_STATUS: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.FAILED_PRECONDITION,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    500: grpc.StatusCode.INTERNAL,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
def grpc_status(http_status: int) -> grpc.StatusCode:
    """The gRPC status of a Hearth error answered on HTTP with ``http_status``."""
    if http_status in BY_STATUS:
        return BY_STATUS[http_status]
    return grpc.StatusCode.INVALID_ARGUMENT if 400 <= http_status < 500 else grpc.StatusCode.UNAVAILABLE


def catalog_table() -> list[tuple[str, int, str]]:
    """Every catalog code with its HTTP status and gRPC status name (for docs/grpc.md)."""
    return [(code, spec.status, grpc_status(spec.status).name) for code, spec in sorted(CATALOG.items())]


class GrpcFailure(Exception):
    """An error as the gRPC door answers it: the status, the message and the trailing metadata."""

    def __init__(self, status: grpc.StatusCode, message: str, trailers: tuple[tuple[str, str], ...]) -> None:
        self.status = status
        self.message = message
        self.trailers = trailers
        super().__init__(message)


def from_hearth_error(exc: HearthError, request_id: str) -> GrpcFailure:
    trailers = [("hearth-error-code", exc.code), ("x-should-retry", "true" if exc.should_retry else "false"),
                ("x-request-id", request_id)]
    if exc.param is not None:
        trailers.append(("hearth-error-param", _ascii(exc.param)))
    if exc.retry_after is not None:
        trailers.append(("retry-after-ms", retry_after_headers(exc.retry_after)["retry-after-ms"]))
    return GrpcFailure(grpc_status(exc.status), exc.message, tuple(trailers))


def from_upstream_refusal(exc: UpstreamHTTPError, request_id: str) -> GrpcFailure:
    """A caller mistake the upstream caught (say, a context too long): its message and code, not retryable."""
    error: Any = exc.body.get("error") if isinstance(exc.body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    upstream_code = error.get("code") if isinstance(error, dict) else None
    trailers = (("hearth-error-code", "upstream_bad_request"), ("x-should-retry", "false"),
                ("x-request-id", request_id)) + ((("upstream-error-code", _ascii(upstream_code)),)
                                                 if isinstance(upstream_code, str) and upstream_code else ())
    status = grpc_status(exc.status)
    return GrpcFailure(status, message if isinstance(message, str) and message else CATALOG[
        "upstream_bad_request"].message, trailers)


def from_stream_error(code: str, message: str, request_id: str) -> GrpcFailure:
    """An error event that ended a started stream (deadline, upstream cut or error, shutdown)."""
    spec = CATALOG.get(code) or CATALOG["upstream_stream_error"]
    return GrpcFailure(grpc_status(spec.status), message,
                       (("hearth-error-code", code if code in CATALOG else "upstream_stream_error"),
                        ("x-should-retry", "true" if spec.retryable else "false"), ("x-request-id", request_id)))


def client_too_slow(send_timeout_s: float, request_id: str) -> GrpcFailure:
    """A stream whose client took no message for ``stream_send_timeout_s``: ended, as on HTTP (499
    ``client_too_slow`` in the log); the status is ``CANCELLED``, if the client ever reads it."""
    return GrpcFailure(grpc.StatusCode.CANCELLED, f"The client took no message for {send_timeout_s:g} s.",
                       (("hearth-error-code", "client_too_slow"), ("x-should-retry", "false"),
                        ("x-request-id", request_id)))


def _ascii(value: str) -> str:
    """Metadata values are printable ASCII: anything else is escaped, never dropped silently."""
    return value.encode("ascii", "backslashreplace").decode("ascii")[:256]
