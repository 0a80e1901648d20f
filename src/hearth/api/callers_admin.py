"""Admin API for callers (``HEARTH_ADMIN_TOKEN``): create, list, show, update policy, rotate, revoke.

A key appears in exactly two answers: the 201 of a create and the answer of a rotate. Listings show
the key prefix only. The work is done by :mod:`hearth.auth.caller_admin` (shared with ``hearth keys``);
after a change this process reloads its registry snapshot, so a new key works and an old one fails
here at once, and in other processes within ``HEARTH_REGISTRY_REFRESH_S``.

A name in a path follows :mod:`hearth.registry.names` (no ``/``), else 400 ``invalid_request``; the
routes match any name (``{name:anyname}``, :mod:`hearth.api.path_names`), so that ``/callers/a/b`` or
``/callers/a%0Ab`` is that 400 rather than a confusing 404.

This router must be included before :mod:`hearth.api.admin`, whose generic ``/{kind}`` routes
would otherwise claim ``/callers``.
"""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES, OK, OkEnvelope
from hearth.api.deps import read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.path_names import register_any_name
from hearth.api.route_defaults import api_router
from hearth.auth import caller_admin
from hearth.registry.names import check_name

register_any_name()
router = api_router(prefix="/api/v1/admin/callers", tags=["admin", "callers"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)


@router.post("", summary="Create a caller; the answer carries its key, shown this once", status_code=201,
             responses={201: {"model": OkEnvelope}})
async def create_caller(request: Request) -> Response:
    spec = caller_admin.parse_policy(await read_json_object(request))
    rt = runtime(request)
    issued = await caller_admin.create(rt.engine, spec, rt.vault)
    await rt.reload_registry()
    return ok(request, issued.as_dict(), status=201)


@router.get("", summary="List callers (key prefixes only)", responses=OK)
async def list_callers(request: Request) -> Response:
    return ok(request, await caller_admin.list_all(runtime(request).engine))


@router.get("/{name:anyname}", summary="Show one caller (key prefix only)", responses=OK)
async def get_caller(name: str, request: Request) -> Response:
    check_name(name)
    return ok(request, await caller_admin.get(runtime(request).engine, name))


@router.put("/{name:anyname}", summary="Declare a caller's policy (idempotent; never changes the key)",
            responses=OK)
async def update_caller(name: str, request: Request) -> Response:
    check_name(name)
    spec = caller_admin.parse_policy(await read_json_object(request), name)
    rt = runtime(request)
    report = await caller_admin.update_policy(rt.engine, spec, rt.vault)
    if report.changed:
        await rt.reload_registry()
    return ok(request, report.as_dict())


@router.post("/{name:anyname}/rotate", summary="Issue a new key; the old one stops working", responses=OK)
async def rotate_key(name: str, request: Request) -> Response:
    check_name(name)
    rt = runtime(request)
    issued = await caller_admin.rotate(rt.engine, name)
    await rt.reload_registry()
    return ok(request, issued.as_dict())


@router.post("/{name:anyname}/revoke", summary="Revoke a caller's key (rotate issues a new one)", responses=OK)
async def revoke_key(name: str, request: Request) -> Response:
    check_name(name)
    rt = runtime(request)
    caller = await caller_admin.revoke(rt.engine, name)
    await rt.reload_registry()
    return ok(request, caller)
