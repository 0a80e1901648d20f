"""Admin API for prompts and roles (``HEARTH_ADMIN_TOKEN``), as seed 000 names it.

``POST /api/v1/prompts`` creates a code (version 1) or the next version of one; versions are immutable,
and ``PATCH .../versions/{version}`` moves their status (activate, deactivate, disable — audited with
operator and reason), sets a canary share, or changes the prompt's display fields. Roll back = activate
an older version. After a change this process reloads its catalog at once; others within
``HEARTH_PROMPT_REFRESH_S``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi import Depends, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES, OK, OkEnvelope
from hearth.api.deps import read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_model
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.observability.request_log import prompt_version_stats
from hearth.prompts import store
from hearth.prompts.spec import CODE_PATTERN, PromptCreate, RolePatch, RoleSpec, VersionPatch

router = api_router(prefix="/api/v1", tags=["prompts"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)
def _code(code: str) -> str:
    if not re.fullmatch(CODE_PATTERN, code):
        raise HearthError("invalid_request", "A code is lower-case letters, digits, `_`, `.` and `-` (at most 128).",
                          param="code")
    return code


@router.get("/prompts", summary="List prompts with their active and canary versions", responses=OK)
async def list_prompts(request: Request) -> Response:
    return ok(request, await store.list_prompts(runtime(request).engine))


@router.post("/prompts", summary="Create a prompt (version 1) or add the next version of an existing one",
             status_code=201, openapi_extra=request_body(PromptCreate), responses={201: {"model": OkEnvelope}})
async def create_prompt(request: Request) -> Response:
    spec = parse_model(PromptCreate, await read_json_object(request), "prompt")
    rt = runtime(request)
    row = await store.create_version(rt.engine, spec)
    await rt.prompts.load()
    return ok(request, row, status=201)


@router.get("/prompts/{code}", summary="One prompt: display fields, the active version, versions, history",
            responses=OK)
async def get_prompt(code: str, request: Request) -> Response:
    return ok(request, await store.get_prompt(runtime(request).engine, _code(code)))


@router.get("/prompts/{code}/versions", summary="Every version of a prompt, with its contents", responses=OK)
async def list_versions(code: str, request: Request) -> Response:
    return ok(request, await store.list_versions(runtime(request).engine, _code(code)))


@router.patch("/prompts/{code}/versions/{version}", openapi_extra=request_body(VersionPatch), responses=OK,
              summary="Activate, deactivate or disable a version (audited), set a canary share, or change the "
              "prompt's display fields")
async def patch_version(code: str, version: int, request: Request) -> Response:
    patch = parse_model(VersionPatch, await read_json_object(request), "change")
    rt = runtime(request)
    row = await store.change_version(rt.engine, _code(code), version, patch)
    await rt.prompts.load()
    return ok(request, row)


@router.get("/prompts/{code}/stats", summary="Compare a prompt's versions: calls, success, schema failures, "
            "latency, cost (from the request logs)", responses=OK)
async def get_stats(code: str, request: Request, since_hours: float = 24.0) -> Response:
    rt = runtime(request)
    await store.get_prompt(rt.engine, _code(code))  # 404 for an unknown code
    if not 0 < since_hours <= 24 * 90:
        raise HearthError("invalid_request", "`since_hours` must be within (0, 2160].", param="since_hours")
    since = datetime.now(UTC) - timedelta(hours=since_hours)
    return ok(request, {"code": code, "since": since.isoformat(),
                        "versions": await prompt_version_stats(rt.engine, code, since)})


@router.get("/roles", summary="List roles", responses=OK)
async def list_roles(request: Request) -> Response:
    return ok(request, await store.list_roles(runtime(request).engine))


@router.post("/roles", summary="Create a role", status_code=201, openapi_extra=request_body(RoleSpec),
             responses={201: {"model": OkEnvelope}})
async def create_role(request: Request) -> Response:
    spec = parse_model(RoleSpec, await read_json_object(request), "role")
    rt = runtime(request)
    row = await store.create_role(rt.engine, spec)
    await rt.prompts.load()
    return ok(request, row, status=201)


@router.get("/roles/{code}", summary="One role", responses=OK)
async def get_role(code: str, request: Request) -> Response:
    return ok(request, await store.get_role(runtime(request).engine, _code(code)))


@router.patch("/roles/{code}", summary="Change a role (\"\" unbinds prompt_code, model or scene)",
              openapi_extra=request_body(RolePatch), responses=OK)
async def patch_role(code: str, request: Request) -> Response:
    patch = parse_model(RolePatch, await read_json_object(request), "change")
    rt = runtime(request)
    row = await store.change_role(rt.engine, _code(code), patch)
    await rt.prompts.load()
    return ok(request, row)
