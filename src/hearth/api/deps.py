"""Request-level plumbing shared by routers: the runtime, authentication, JSON body parsing."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import orjson
from fastapi import Request

from hearth.errors import HearthError
from hearth.registry.snapshot import Caller
from hearth.runtime import Runtime


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def request_id(request: Request) -> str:
    rid: str = request.scope.get("state", {}).get("request_id", "")
    return rid


def _bearer(request: Request) -> str | None:
    value = request.headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def authenticate_caller(request: Request) -> Caller:
    """The caller owning the bearer key; 401 ``invalid_api_key`` otherwise (no hint which part failed)."""
    token = _bearer(request)
    if token is None:
        raise HearthError("invalid_api_key", "Missing API key: send `Authorization: Bearer <key>`.")
    caller = runtime(request).gateway.registry.callers_by_key_hash.get(hashlib.sha256(token.encode()).hexdigest())
    if caller is None or not caller.enabled:
        raise HearthError("invalid_api_key", "Incorrect API key provided.")
    return caller


def require_admin(request: Request) -> None:
    expected = runtime(request).settings.admin_token
    token = _bearer(request)
    if not expected:
        raise HearthError("forbidden", "The admin API is off: set HEARTH_ADMIN_TOKEN to enable it.")
    if token is None or not hmac.compare_digest(token.encode(), expected.encode()):
        raise HearthError("admin_token_required")


async def read_json_object(request: Request) -> dict[str, Any]:
    limit = runtime(request).settings.max_request_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HearthError("request_too_large", details={"max_bytes": limit})
    raw = await request.body()
    if len(raw) > limit:
        raise HearthError("request_too_large", details={"max_bytes": limit})
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise HearthError("invalid_json", f"The request body is not valid JSON: {exc.msg}.") from exc
    if not isinstance(body, dict):
        raise HearthError("invalid_json", "The request body must be a JSON object.")
    return body
