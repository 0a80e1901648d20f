"""Workflow definitions (admin): register (JSON, or YAML with a YAML content type), list, read versions.

A registration is validated in full before anything is stored — a 400 names the path at fault
(``details.param``, e.g. ``steps[2].needs[0]``) — and an unchanged definition registered again answers
its existing version (``created: false``). A run executes a version as tasks and review items
(:mod:`hearth.workflows.runs`); ``POST /runs/{id}/signals`` delivers an external event to the run's ``wait``
step; reading, following and acting on a run is :mod:`hearth.api.workflow_runs`.
"""

from __future__ import annotations

from typing import Any

import yaml
from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES
from hearth.api.deps import read_body, read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import json_too_deep, parse_json_object, parse_model
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.registry.names import RegistryName
from hearth.workflows.definition_store import DefinitionStore
from hearth.workflows.definitions import NAME_PATTERN
from hearth.yaml_documents import load_yaml

router = api_router(prefix="/api/v1/workflows", tags=["workflows"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)


def _store(request: Request) -> DefinitionStore:
    return runtime(request).workflows


def definition_view(row: Any) -> dict[str, Any]:
    return {"name": row["name"], "version": row["version"], "digest": row["digest"], "created_at": row["created_at"],
            "definition": row["spec"]}


async def _definition_body(request: Request) -> dict[str, Any]:
    raw = await read_body(request)
    if "yaml" not in request.headers.get("content-type", ""):
        return parse_json_object(raw)
    try:
        body = load_yaml(raw)
    except yaml.YAMLError as exc:
        raise HearthError("invalid_json", f"The request body is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(body, dict) or json_too_deep(body):
        raise HearthError("invalid_json", "The request body must be a YAML mapping of bounded depth.")
    return body


class RunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    caller: RegistryName = Field(description="whose tasks the run's steps are")
    input: dict[str, Any] = Field(default_factory=dict)
    version: int | None = Field(default=None, ge=1, description="default: the newest")


class SignalCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event: str = Field(pattern=NAME_PATTERN, description="the event a `wait` step of the run waits for")
    payload: Any = Field(default=None, description="any JSON: it becomes the output of the wait step that takes it")


@router.post("/runs/{run_id}/signals", summary="Send an external event to a run: the wait step for it takes it (now, "
             "or when it begins waiting); 409 `workflow_signal_unexpected` when no step of the run can",
             openapi_extra=request_body(SignalCreate))
async def signal_run(run_id: str, request: Request) -> Response:
    body = parse_model(SignalCreate, await read_json_object(request), "signal")
    signal = await runtime(request).runs.signal(run_id, event=body.event, payload=body.payload)
    return ok(request, signal, status=202)


@router.post("/{name}/runs", summary="Start a run of a workflow (the newest version, or `version`)",
             openapi_extra=request_body(RunCreate))
async def start_run(name: str, request: Request) -> Response:
    body = parse_model(RunCreate, await read_json_object(request), "run")
    if body.caller not in runtime(request).gateway.registry.callers_by_name:
        raise HearthError("invalid_request", f"No caller `{body.caller}` in the registry.", param="caller")
    run = await runtime(request).runs.start(name, caller=body.caller, run_input=body.input, version=body.version)
    return ok(request, run, status=201)


@router.post("", summary="Register a workflow definition (a new version unless unchanged)",
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": {"type": "object"}},
                 "application/yaml": {"schema": {"type": "string"}}}}})
async def register_workflow(request: Request) -> Response:
    body = await _definition_body(request)
    types = runtime(request).tasks.service.types.names()
    row, created = await _store(request).register(body, known_task_types=types)
    return ok(request, {**definition_view(row), "created": created}, status=201 if created else 200)


@router.get("", summary="Every workflow with its newest version")
async def list_workflows(request: Request) -> Response:
    rows = await _store(request).latest()
    return ok(request, {"workflows": [dict(r) for r in rows]})


@router.get("/{name}", summary="A workflow's newest version, or `?version=`")
async def get_workflow(name: str, request: Request, *, version: int | None = None) -> Response:
    return ok(request, definition_view(await _store(request).get(name, version)))


@router.get("/{name}/versions", summary="Every version of a workflow, oldest first")
async def list_versions(name: str, request: Request) -> Response:
    return ok(request, {"versions": [dict(r) for r in await _store(request).versions(name)]})
