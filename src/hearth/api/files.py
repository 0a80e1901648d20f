"""OpenAI's Files API, for batches: ``/v1/files`` (upload, list, retrieve, content, delete).

``POST /v1/files`` takes ``multipart/form-data`` with the file in field ``file`` and ``purpose=batch``, read as
it streams and capped at ``batch_file_max_bytes`` (:mod:`hearth.api.multipart_upload`; a caller that must sign
signs the multipart body as sent). Files belong to the caller that uploaded them (or for whom a batch produced
them): another caller's file is 404 ``file_not_found``, as one that does not exist. Errors are OpenAI's error
object, as on every ``/v1`` route.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from hearth.api.batch_schemas import FileDeleted, FileList, FileObject
from hearth.api.deps import authenticate_caller, runtime
from hearth.api.multipart_upload import FIELD, signed_upload
from hearth.api.openai_schemas import ERROR_RESPONSES
from hearth.api.route_defaults import api_router
from hearth.batches.file_store import MAX_LIST, FileStore, too_large
from hearth.errors import HearthError

router = api_router(prefix="/v1/files", tags=["files"], responses=ERROR_RESPONSES)

_UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": [FIELD, "purpose"], "properties": {
        FIELD: {"type": "string", "format": "binary", "description": "JSONL: one batch request per line"},
        "purpose": {"type": "string", "enum": ["batch"]}}}}}}}


def file_store(request: Request) -> FileStore:
    files = runtime(request).files
    assert files is not None, "the runtime builds the file store"
    return files


def _json(value: dict[str, Any]) -> Response:
    return Response(orjson.dumps(value), media_type="application/json")


@router.post("", summary="Upload a file (purpose `batch`: JSONL of batch requests)", openapi_extra=_UPLOAD_BODY,
             responses={200: {"model": FileObject}})
async def create_file(request: Request) -> Response:
    files = file_store(request)
    try:
        caller, upload = await signed_upload(request, max_file_bytes=files.max_bytes)
    except HearthError as exc:
        if exc.code == "document_too_large":  # the reader's code for documents; files have their own
            raise too_large(files.max_bytes) from None
        raise
    purpose = upload.fields.get("purpose")
    if not purpose:
        raise HearthError("invalid_request", "`purpose` is required.", param="purpose")
    stored = await files.upload(upload.data, filename=upload.filename, purpose=purpose, caller=caller.name)
    return _json(stored.view())


@router.get("", summary="List this caller's files (newest first; `after` pages on)",
            responses={200: {"model": FileList}})
async def list_files(request: Request, *, purpose: str | None = None, after: str | None = None, limit: int = 10_000,
                     order: str = "desc") -> Response:
    caller = await authenticate_caller(request)
    if not 1 <= limit <= MAX_LIST:
        raise HearthError("invalid_request", f"`limit` must be between 1 and {MAX_LIST}.", param="limit")
    if order not in ("asc", "desc"):
        raise HearthError("invalid_request", "`order` must be asc or desc.", param="order")
    page = await file_store(request).page(caller.name, purpose=purpose, after=after, limit=limit,
                                          newest_first=order == "desc")
    return _json(page.view())


@router.get("/{file_id}", summary="Retrieve a file's metadata", responses={200: {"model": FileObject}})
async def get_file(file_id: str, request: Request) -> Response:
    caller = await authenticate_caller(request)
    return _json((await file_store(request).get(file_id, caller.name)).view())


@router.get("/{file_id}/content", summary="A file's bytes", responses={
    200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
async def get_file_content(file_id: str, request: Request) -> Response:
    caller = await authenticate_caller(request)
    data = await file_store(request).content(file_id, caller.name)
    return Response(data, media_type="application/octet-stream", headers={"X-Content-Type-Options": "nosniff",
                                                                          "Cache-Control": "private, no-store"})


@router.delete("/{file_id}", summary="Delete a file", responses={200: {"model": FileDeleted}})
async def delete_file(file_id: str, request: Request) -> Response:
    caller = await authenticate_caller(request)
    await file_store(request).delete(file_id, caller.name)
    return _json({"id": file_id, "object": "file", "deleted": True})
