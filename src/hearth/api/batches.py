"""OpenAI's Batch API: ``/v1/batches`` (create, retrieve, cancel, list), run by the task engine.

Creating a batch checks its input file with the same request validation as the synchronous route
(``validate_chat`` / ``validate_embeddings``): a line whose body that validation refuses is answered 400 in the
error file, the others run (:mod:`hearth.batches.service`). ``X-Hearth-Tenant`` names the tenant every line is
charged to, as on the chat route; each line's ``body.user`` is its end user. Errors are OpenAI's error object.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from hearth.api.batch_schemas import BatchCreate, BatchList, BatchObject
from hearth.api.chat_validation import validate_chat, validate_embeddings
from hearth.api.deps import authenticate_caller, authenticated_body, claim_nonce, request_id, runtime
from hearth.api.openai_schemas import ERROR_RESPONSES, request_body
from hearth.api.request_body import parse_json_object
from hearth.api.route_defaults import api_router
from hearth.batches.service import MAX_PAGE, BatchService, batch_request
from hearth.errors import HearthError

router = api_router(prefix="/v1/batches", tags=["batches"], responses=ERROR_RESPONSES)


def _service(request: Request) -> BatchService:
    batches = runtime(request).batches
    assert batches is not None, "the runtime builds the batch service"
    return batches


def _json(value: dict[str, Any]) -> Response:
    return Response(orjson.dumps(value), media_type="application/json")


@router.post("", summary="Create a batch from an uploaded JSONL file", openapi_extra=request_body(BatchCreate),
             responses={200: {"model": BatchObject}})
async def create_batch(request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    tenant = request.headers.get("x-hearth-tenant")
    req = batch_request(parse_json_object(raw), caller=caller.name, tenant=tenant[:256] if tenant else None)
    await claim_nonce(request, nonce)
    check = validate_embeddings if req.endpoint == "/v1/embeddings" else validate_chat
    batch = await _service(request).create(req, check_body=check, request_id_=request_id(request) or None)
    return _json(batch.view())


@router.get("", summary="List this caller's batches (newest first; `after` pages on)",
            responses={200: {"model": BatchList}})
async def list_batches(request: Request, after: str | None = None, limit: int = 20) -> Response:
    caller = await authenticate_caller(request)
    if not 1 <= limit <= MAX_PAGE:
        raise HearthError("invalid_request", f"`limit` must be between 1 and {MAX_PAGE}.", param="limit")
    return _json(await _service(request).page(caller.name, after=after, limit=limit))


@router.get("/{batch_id}", summary="Retrieve a batch", responses={200: {"model": BatchObject}})
async def get_batch(batch_id: str, request: Request) -> Response:
    caller = await authenticate_caller(request)
    return _json((await _service(request).get(batch_id, caller.name)).view())


@router.post("/{batch_id}/cancel", summary="Cancel a batch (it stops sending, then ends `cancelled`)",
             responses={200: {"model": BatchObject}})
async def cancel_batch(batch_id: str, request: Request) -> Response:
    caller, _raw, nonce = await authenticated_body(request)
    await claim_nonce(request, nonce)
    return _json((await _service(request).cancel(batch_id, caller.name)).view())
