"""Seed 000's registry shortcuts (admin token): ``POST /api/v1/model/providers`` and ``POST /api/v1/models``,
idempotent upserts by code on top of the registry (see :mod:`hearth.registry.shortcuts`). The answer is the
apply report (what was created, updated or left unchanged); this process reloads its snapshot at once."""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES, OK
from hearth.api.deps import read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_model
from hearth.api.route_defaults import api_router
from hearth.registry.shortcuts import ModelShortcut, ProviderShortcut, model_spec, provider_spec
from hearth.registry.store import apply_registry

router = api_router(prefix="/api/v1", tags=["registry"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)


@router.post("/model/providers", summary="Create or update a provider by code (idempotent)", responses=OK,
             openapi_extra=request_body(ProviderShortcut))
async def upsert_provider(request: Request) -> Response:
    body = parse_model(ProviderShortcut, await read_json_object(request), "provider")
    rt = runtime(request)
    report = await apply_registry(rt.engine, provider_spec(body), rt.vault)
    if report.changed:
        await rt.reload_registry()
    return ok(request, report.as_dict())


@router.post("/models", summary="Create or update a provider's model: its endpoint and public model (idempotent)",
             responses=OK, openapi_extra=request_body(ModelShortcut))
async def upsert_model(request: Request) -> Response:
    body = parse_model(ModelShortcut, await read_json_object(request), "model")
    rt = runtime(request)
    report = await apply_registry(rt.engine, model_spec(body, rt.gateway.registry), rt.vault)
    if report.changed:
        await rt.reload_registry()
    return ok(request, report.as_dict())
