"""A small synchronous client for Hearth's admin API: one request, the envelope unwrapped, errors readable.

The standard library's ``urllib`` is enough for an operator's one-request-at-a-time commands and adds
no dependency. Every failure becomes an :class:`ApiError` carrying what an operator needs to act: the
HTTP status, Hearth's stable error code and its message (never the token).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

DEFAULT_URL = "http://127.0.0.1:8080"

UrlOption = Annotated[str, typer.Option("--url", envvar="HEARTH_URL", help="the Hearth server (else HEARTH_URL)")]
TokenOption = Annotated[str | None, typer.Option(
    "--token", envvar="HEARTH_ADMIN_TOKEN", show_default=False,
    help="admin token (else HEARTH_ADMIN_TOKEN; prefer the variable: a flag shows in `ps`)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print the API's data as JSON (for scripts)")]
TimeoutOption = Annotated[float, typer.Option("--timeout", min=0.1, help="seconds to wait for each answer")]


@dataclass(frozen=True, slots=True)
class ApiError(Exception):
    """A refused or failed request. ``status`` 0 means Hearth could not be reached at all."""

    status: int
    code: str
    message: str

    def __str__(self) -> str:
        if self.status == 0:
            return self.message
        return f"{self.message} (HTTP {self.status}, {self.code})"


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def send(method: str, url: str, *, headers: Mapping[str, str], body: bytes | None = None,
         timeout: float = 10.0) -> Response:
    """One HTTP request with the exact ``url`` and ``body`` bytes given (nothing re-encoded, so a signed
    request goes out as signed). Any answer, 4xx and 5xx included, is returned; only a connection
    failure raises :class:`ApiError` (status 0)."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return Response(answer.status, dict(answer.headers.items()), answer.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return Response(exc.code, dict(exc.headers.items()), exc.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApiError(0, "unreachable", f"cannot reach Hearth at {url.split('?', 1)[0]}: {reason}") from None


def error_of(response: Response) -> ApiError:
    """The error an answer carries: Hearth's envelope, OpenAI's error object, or the bare status."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return ApiError(response.status, str(error.get("code") or error.get("type") or "error"),
                        str(error.get("message") or "no message"))
    return ApiError(response.status, "http_error", f"the server answered HTTP {response.status} without an error "
                    "body: is it a Hearth server (--url)?")


class AdminClient:
    """Hearth's admin API at ``base_url`` with the admin token: ``get``/``post`` return the envelope's data."""

    def __init__(self, base_url: str, token: str | None, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout

    def _headers(self, *, with_body: bool) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "hearth-cli"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if with_body:
            headers["Content-Type"] = "application/json"
        return headers

    def url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        return f"{self.base_url}{path}" + (f"?{query}" if query else "")

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                body: Mapping[str, Any] | None = None) -> Response:
        raw = None if body is None else json.dumps(body).encode()
        return send(method, self.url(path, params), headers=self._headers(with_body=raw is not None), body=raw,
                    timeout=self.timeout)

    def call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
             body: Mapping[str, Any] | None = None) -> Any:
        response = self.request(method, path, params=params, body=body)
        if response.status >= 400:
            raise error_of(response)
        try:
            payload = response.json()
        except ValueError:
            raise ApiError(response.status, "not_json", f"the answer from {self.base_url} is not JSON: is it a "
                           "Hearth server (--url)?") from None
        if not isinstance(payload, dict) or "success" not in payload:
            raise ApiError(response.status, "not_hearth", f"the answer from {self.base_url} is not Hearth's "
                           "envelope: is it a Hearth server (--url)?")
        return payload.get("data")

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def post(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        return self.call("POST", path, body=body if body is not None else {})


def quote(segment: str) -> str:
    """One path segment (a task, review or schedule id), percent-encoded."""
    return urllib.parse.quote(segment, safe="")
