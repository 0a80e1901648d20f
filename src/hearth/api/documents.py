"""The document API: upload a document, read what was recorded about it, download its bytes.

``POST /api/v1/documents`` takes a ``multipart/form-data`` body with the file in field ``file`` (read as
it streams, capped at ``document_max_bytes``: :mod:`hearth.api.multipart_upload`), or a JSON body
``{"file_id": ...}`` / ``{"file_url": ...}`` read through the capability layer's guarded readers. The type
is decided from the bytes (:mod:`hearth.documents.sniff`). Callers authenticate as on the capability API
(key or shared token, signatures when required: a signed upload signs the multipart body as sent) and
see their own documents; the admin token sees every document.
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import quote

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from hearth.api.admin_schemas import ErrorEnvelope
from hearth.api.deps import authenticate_caller, authenticated_body, claim_nonce, runtime
from hearth.api.envelope import ok
from hearth.api.multipart_upload import FIELD, signed_upload
from hearth.api.openai_schemas import inline_schema
from hearth.api.request_body import parse_json_object, parse_model
from hearth.api.route_defaults import DeferredOpenApi, api_router
from hearth.auth.internal import bearer_token
from hearth.documents.service import DocumentService
from hearth.documents.sniff import TEXT
from hearth.errors import HearthError

DOCUMENT_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{code: {"model": ErrorEnvelope} for code in (400, 401, 403, 404, 413, 415, 500, 502, 503, 504)},
    "4XX": {"model": ErrorEnvelope, "description": "Another client error"},
}
router = api_router(prefix="/api/v1/documents", tags=["documents"], responses=DOCUMENT_ERROR_RESPONSES)


class DocumentSource(BaseModel):
    """A document read from where Hearth can reach it: exactly one of ``file_id`` and ``file_url``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"file_url": "https://example.com/10-k.pdf"}]})

    file_id: str | None = Field(default=None, min_length=1, max_length=4096,
                                description="a path relative to the operator's `file_root`")
    file_url: str | None = Field(default=None, min_length=1, max_length=8192,
                                 description="an http(s) URL (SSRF-guarded: public addresses or the operator's "
                                 "allowlist)")


class Document(BaseModel):
    id: str
    caller: str
    filename: str | None
    content_type: str
    size: int
    sha256: str
    page_count: int | None
    created_at: float


class DocumentEnvelope(BaseModel):
    success: bool
    data: Document
    error: None = None
    request_id: str | None = None


_UPLOAD_BODY = {"requestBody": DeferredOpenApi(lambda: {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": [FIELD], "properties": {
        FIELD: {"type": "string", "format": "binary", "description": "the document (PDF, PNG, JPEG or UTF-8 text)"}}}},
    "application/json": {"schema": inline_schema(DocumentSource)}}})}


def _service(request: Request) -> DocumentService:
    return runtime(request).documents


async def document_viewer(request: Request) -> str | None:
    """The caller whose documents the request may see, or None for the admin token (every document)."""
    expected = runtime(request).settings.admin_token
    token = bearer_token(request.headers)
    if expected and token is not None and hmac.compare_digest(token.encode(), expected.encode()):
        return None
    return (await authenticate_caller(request)).name


@router.post("", summary="Store a document (multipart field `file`, or JSON `file_id` / `file_url`); its type is "
             "decided from its bytes", status_code=201, openapi_extra=_UPLOAD_BODY,
             responses={201: {"model": DocumentEnvelope}})
async def create_document(request: Request) -> Response:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media == "multipart/form-data":
        doc = await _upload(request)
    elif media in ("application/json", ""):
        doc = await _from_source(request)
    else:
        raise HearthError("invalid_request", "Send multipart/form-data (field `file`) or application/json "
                          "(`file_id` or `file_url`).", details={"reason": "content_type"})
    return ok(request, doc.view(), status=201)


async def _upload(request: Request) -> Any:
    rt = runtime(request)
    caller, upload = await signed_upload(request, max_file_bytes=rt.documents.limits.max_bytes)
    return await rt.documents.upload(upload.data, filename=upload.filename, caller=caller.name,
                                     declared_type=upload.content_type)


async def _from_source(request: Request) -> Any:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_model(DocumentSource, parse_json_object(raw), "document")
    if (body.file_id is None) == (body.file_url is None):
        raise HearthError("invalid_request", "Give exactly one of `file_id` and `file_url`.",
                          details={"reason": "one_source"})
    await claim_nonce(request, nonce)
    service = _service(request)
    if body.file_id is not None:
        return await service.from_file_id(body.file_id, caller=caller.name)
    assert body.file_url is not None
    return await service.from_url(body.file_url, caller=caller.name)


@router.get("/{document_id}", summary="A document: type, size, SHA-256, page count", responses={
    200: {"model": DocumentEnvelope}})
async def get_document(document_id: str, request: Request) -> Response:
    doc = await _service(request).get(document_id, await document_viewer(request))
    return ok(request, doc.view())


@router.get("/{document_id}/content", summary="The document's bytes, with the content type sniffed at upload",
            responses={200: {"content": {"application/pdf": {}, "image/png": {}, "image/jpeg": {}, "text/plain": {}}}})
async def get_content(document_id: str, request: Request) -> Response:
    service = _service(request)
    doc = await service.get(document_id, await document_viewer(request))
    data = await service.read_bytes(doc.id)
    media = f"{TEXT}; charset=utf-8" if doc.content_type == TEXT else doc.content_type
    return Response(data, media_type=media, headers={
        "Content-Disposition": _attachment(doc.filename or doc.id), "X-Content-Type-Options": "nosniff",
        "ETag": f'"{doc.sha256}"', "Cache-Control": "private, no-store"})


def _attachment(name: str) -> str:
    """An attachment header any client reads: an ASCII fallback name and the exact one (RFC 6266)."""
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"
