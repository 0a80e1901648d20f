"""Workflow runs (admin): read one, follow its changes (SSE), and act on it as an operator.

Every action body carries ``operator`` and ``reason`` (400 ``operator_reason_required`` without them); each
action is audited and shows in the run's ``actions``. What each action means, and how it is safe against the
scheduler passes of every process, is in :mod:`hearth.workflows.run_actions`; the events in
:mod:`hearth.workflows.run_events`. Starting a run is ``POST /api/v1/workflows/{name}/runs``
(:mod:`hearth.api.workflows`).
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES
from hearth.api.deps import read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.event_stream import EventStreamResponse, last_event_id
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_model
from hearth.api.route_defaults import api_router
from hearth.api.workflow_run_events import RunEventFrames
from hearth.workflows.run_actions import Audit, RunActions

router = api_router(prefix="/api/v1/workflows/runs", tags=["workflows"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)


class RunAction(BaseModel):
    """Who acts and why: both required (non-empty), both kept in the run's audited ``actions``."""

    model_config = ConfigDict(extra="forbid")

    operator: str = Field(default="", max_length=128)
    reason: str = Field(default="", max_length=2000)


class MarkSucceeded(RunAction):
    output: Any = Field(default=None, description="the step's output as the steps after it will read it (default "
                        "null); execution state only — no business outcome is decided by marking a step")


def _actions(request: Request) -> RunActions:
    return RunActions(runtime(request).runs)


async def _audit(request: Request) -> Audit:
    body = parse_model(RunAction, await read_json_object(request), "action")
    return Audit(operator=body.operator, reason=body.reason)


@router.get("/{run_id}", summary="A run: its state, every step's state, task or review, output and timings, and its "
            "audited operator actions")
async def get_run(run_id: str, request: Request) -> Response:
    return ok(request, await _actions(request).view(run_id))


@router.get("/{run_id}/events", summary="The run's changes as Server-Sent Events (`snapshot`, then `action`, `step`, "
            "`run`) until it ends; `Last-Event-ID` continues the numbering with a fresh snapshot")
async def run_events(run_id: str, request: Request) -> Response:
    actions = _actions(request)
    await actions.runs.get(run_id)  # 404 before the stream starts
    after = last_event_id(request)
    heartbeat_s = runtime(request).settings.sse_heartbeat_s
    return EventStreamResponse(RunEventFrames(actions, run_id, after=after, heartbeat_s=heartbeat_s))


@router.post("/{run_id}/pause", summary="Pause: nothing new starts; what runs keeps running (recorded at resume)",
             openapi_extra=request_body(RunAction))
async def pause_run(run_id: str, request: Request) -> Response:
    return ok(request, await _actions(request).pause(run_id, await _audit(request)))


@router.post("/{run_id}/resume", summary="Resume a paused run", openapi_extra=request_body(RunAction))
async def resume_run(run_id: str, request: Request) -> Response:
    return ok(request, await _actions(request).resume(run_id, await _audit(request)))


@router.post("/{run_id}/terminate", summary="Terminate: the run ends `terminated`, running tasks are cancelled and "
             "open review items withdrawn (never approved)", openapi_extra=request_body(RunAction))
async def terminate_run(run_id: str, request: Request) -> Response:
    return ok(request, await _actions(request).terminate(run_id, await _audit(request)))


@router.post("/{run_id}/steps/{step_id}/rerun", summary="Rerun a step and every step depending on it (their old "
             "checkpoints stay in the audit, unused); reopens a finished run", openapi_extra=request_body(RunAction))
async def rerun_step(run_id: str, step_id: str, request: Request) -> Response:
    return ok(request, await _actions(request).rerun(run_id, step_id, await _audit(request)))


@router.post("/{run_id}/steps/{step_id}/skip", summary="Skip a waiting or failed step: the steps after it see it as "
             "skipped by their join rules", openapi_extra=request_body(RunAction))
async def skip_step(run_id: str, step_id: str, request: Request) -> Response:
    return ok(request, await _actions(request).skip(run_id, step_id, await _audit(request)))


@router.post("/{run_id}/steps/{step_id}/mark-succeeded", summary="Mark a step succeeded with the given `output` "
             "(execution state only: the business outcome is not changed)", openapi_extra=request_body(MarkSucceeded))
async def mark_step_succeeded(run_id: str, step_id: str, request: Request) -> Response:
    body = parse_model(MarkSucceeded, await read_json_object(request), "action")
    audit = Audit(operator=body.operator, reason=body.reason)
    return ok(request, await _actions(request).mark_succeeded(run_id, step_id, audit, output=body.output))
