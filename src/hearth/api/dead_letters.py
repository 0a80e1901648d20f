"""Dead letters (admin): list, detail, acknowledge and redrive — each action with an operator and a reason."""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES
from hearth.api.deps import read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_model
from hearth.api.route_defaults import api_router
from hearth.api.task_schemas import OperatorAction
from hearth.errors import HearthError
from hearth.tasks.dead_letters import SEVERITIES, STATUSES
from hearth.tasks.views import dead_letter_view

router = api_router(prefix="/api/v1/ai/dead-letters", tags=["dead letters"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)


@router.get("", summary="Dead letters, newest first (filter by status, severity, task type; keyset `cursor`)")
async def list_dead_letters(request: Request, *, status: str | None = None, severity: str | None = None,
                            task_type: str | None = None, cursor: str | None = None, limit: int = 50) -> Response:
    if status is not None and status not in STATUSES:
        raise HearthError("invalid_request", f"`status` is one of {', '.join(STATUSES)}.", param="status")
    if severity is not None and severity not in SEVERITIES:
        raise HearthError("invalid_request", f"`severity` is one of {', '.join(SEVERITIES)}.", param="severity")
    if not 1 <= limit <= 500:
        raise HearthError("invalid_request", "`limit` is between 1 and 500.", param="limit")
    rows, next_cursor = await runtime(request).tasks.service.dead_letter_page(
        status=status, severity=severity, task_type=task_type, cursor=cursor, limit=limit)
    return ok(request, {"dead_letters": [dead_letter_view(r) for r in rows], "next_cursor": next_cursor})


@router.get("/{task_id}", summary="One dead letter with its history")
async def get_dead_letter(task_id: str, request: Request) -> Response:
    return ok(request, dead_letter_view(await runtime(request).tasks.service.dead_letter(task_id)))


@router.post("/{task_id}/acknowledge", summary="Seen, nothing to do (needs `operator` and `reason`)",
             openapi_extra=request_body(OperatorAction))
async def acknowledge(task_id: str, request: Request) -> Response:
    body = parse_model(OperatorAction, await read_json_object(request), "action")
    letter = await runtime(request).tasks.service.acknowledge(task_id, operator=body.operator, reason=body.reason)
    return ok(request, dead_letter_view(letter))


@router.post("/{task_id}/redrive", summary="Queue the task for a new attempt (needs `operator` and `reason`); a "
             "success then marks the letter RESOLVED", openapi_extra=request_body(OperatorAction))
async def redrive(task_id: str, request: Request) -> Response:
    body = parse_model(OperatorAction, await read_json_object(request), "action")
    letter = await runtime(request).tasks.service.redrive(task_id, operator=body.operator, reason=body.reason)
    return ok(request, dead_letter_view(letter))
