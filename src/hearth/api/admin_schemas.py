"""OpenAPI documentation models for Hearth's own routes (admin, callers): the response envelope.

Handlers render the envelope themselves (:mod:`hearth.api.envelope`, :mod:`hearth.api.error_handlers`);
these models only make ``/openapi.json`` say what is actually sent, so a generated client, or
schemathesis, can check the answers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class EnvelopeErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any]
    request_id: str | None = None


class ErrorEnvelope(BaseModel):
    success: Literal[False]
    data: None
    error: EnvelopeErrorBody


class OkEnvelope(BaseModel):
    success: Literal[True]
    data: Any
    error: None
    request_id: str | None = None


#: The errors an admin route can answer with; ``4XX`` covers the rest (and replaces FastAPI's 422,
#: which Hearth never sends: request validation errors are 400 ``invalid_request``).
ADMIN_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{code: {"model": ErrorEnvelope} for code in (400, 401, 403, 404, 409, 413, 500, 503)},
    "4XX": {"model": ErrorEnvelope, "description": "Another client error"},
}
OK: dict[int | str, dict[str, Any]] = {200: {"model": OkEnvelope}}
