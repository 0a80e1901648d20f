"""The task API (seed 000): submit, read, follow, cancel and replay tasks; operators' actions on held tasks.

Callers authenticate as on the capability API and see their own tasks; the admin token sees every task
and is the only way to release, skip or mark a held task. ``GET`` on a task is the truth; callbacks and
``/events`` only announce it.
"""

from __future__ import annotations

import hmac
from datetime import datetime
from typing import Any

from fastapi import Request
from starlette.responses import Response

from hearth.api.deps import (
    authenticate_caller,
    authenticated_body,
    claim_nonce,
    read_json_object,
    request_id,
    require_admin,
    runtime,
)
from hearth.api.envelope import ok
from hearth.api.event_stream import EventStreamResponse, last_event_id
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_json_object, parse_model
from hearth.api.route_defaults import api_router
from hearth.api.task_events import TaskEventFrames
from hearth.api.task_schemas import (
    TASK_ERROR_RESPONSES,
    OperatorAction,
    TaskAcceptedEnvelope,
    TaskBatch,
    TaskBatchEnvelope,
    TaskCreate,
)
from hearth.auth.internal import bearer_token
from hearth.errors import HearthError
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.states import STATES
from hearth.tasks.views import delivery_view, event_view, task_view

router = api_router(prefix="/api/v1/ai", tags=["tasks"], responses=TASK_ERROR_RESPONSES)


def _service(request: Request) -> TaskService:
    return runtime(request).tasks.service


async def _viewer(request: Request) -> str | None:
    """The caller whose tasks the request may see, or None for the admin token (every task)."""
    expected = runtime(request).settings.admin_token
    token = bearer_token(request.headers)
    if expected and token is not None and hmac.compare_digest(token.encode(), expected.encode()):
        return None
    return (await authenticate_caller(request)).name


def _submission(body: TaskCreate, *, caller: str, request: Request) -> Submission:
    run_after = body.run_after.timestamp() if isinstance(body.run_after, datetime) else body.run_after
    return Submission(task_type=body.task_type, payload=body.payload, caller=caller, priority=body.priority,
                      queue=body.queue, idempotency_key=body.idempotency_key, callback_url=body.callback_url,
                      run_after=run_after, tenant=body.tenant or request.headers.get("x-hearth-tenant"),
                      end_user=body.user or request.headers.get("x-hearth-user"), request_id=request_id(request))


def _accepted(row: Any, created: bool) -> dict[str, Any]:
    return {"task_id": row["id"], "state": row["state"], "created": created, "task_type": row["task_type"],
            "queue": row["queue"]}


async def _caller_body(request: Request) -> tuple[str, dict[str, Any]]:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_json_object(raw)  # bad JSON costs no nonce
    await claim_nonce(request, nonce)
    return caller.name, body


@router.post("/tasks", summary="Submit a task (202); the same idempotency key returns the same task",
             status_code=202, openapi_extra=request_body(TaskCreate), responses={202: {"model": TaskAcceptedEnvelope}})
async def submit_task(request: Request) -> Response:
    caller, raw = await _caller_body(request)
    body = parse_model(TaskCreate, raw, "task")
    (row, created), = await _service(request).submit([_submission(body, caller=caller, request=request)])
    return ok(request, _accepted(row, created), status=202)


@router.post("/tasks/batch", summary="Submit up to 1,000 tasks in one transaction (all or none)", status_code=202,
             openapi_extra=request_body(TaskBatch), responses={202: {"model": TaskBatchEnvelope}})
async def submit_batch(request: Request) -> Response:
    caller, raw = await _caller_body(request)
    body = parse_model(TaskBatch, raw, "batch")
    out = await _service(request).submit([_submission(t, caller=caller, request=request) for t in body.tasks])
    return ok(request, {"tasks": [_accepted(row, created) for row, created in out]}, status=202)


@router.get("/tasks", summary="List tasks (newest first), or changes since `updated_since` (oldest first) for "
            "reconciliation; keyset-paged with `cursor`")
async def list_tasks(request: Request, *, state: str | None = None, task_type: str | None = None,
                     queue: str | None = None, updated_since: datetime | float | None = None,
                     cursor: str | None = None, limit: int = 50) -> Response:
    viewer = await _viewer(request)
    if state is not None and state not in STATES:
        raise HearthError("invalid_request", f"`state` is one of {', '.join(STATES)}.", param="state")
    if not 1 <= limit <= 500:
        raise HearthError("invalid_request", "`limit` is between 1 and 500.", param="limit")
    since = updated_since.timestamp() if isinstance(updated_since, datetime) else updated_since
    rows, next_cursor = await _service(request).listing(caller=viewer, state=state, task_type=task_type, queue=queue,
                                                        updated_since=since, cursor=cursor, limit=limit)
    return ok(request, {"tasks": [task_view(r) for r in rows], "next_cursor": next_cursor})


@router.get("/tasks/{task_id}", summary="A task: state, progress, step, attempts, timings, error")
async def get_task(task_id: str, request: Request) -> Response:
    service = _service(request)
    row = await service.get(task_id, caller=await _viewer(request))
    return ok(request, task_view(row, attempts=await service.attempts(task_id)))


@router.get("/tasks/{task_id}/result", summary="A finished task's result (409 `task_not_finished` before)")
async def get_result(task_id: str, request: Request) -> Response:
    row = await _service(request).get(task_id, caller=await _viewer(request))
    if row["state"] in ("succeeded", "mark_succeeded"):
        return ok(request, {"task_id": task_id, "state": row["state"], "result": row["result"]})
    if row["state"] in ("failed", "killed", "skipped"):
        raise HearthError("task_state_conflict", f"The task ended {row['state']}: it has no result.",
                          details={"state": row["state"], "error": row["error"]})
    raise HearthError("task_not_finished", f"The task is {row['state']}.", details={"state": row["state"]},
                      retry_after=1)


@router.get("/tasks/{task_id}/events", summary="Server-sent events: every state change and progress report "
            "until the task ends; resumable with `Last-Event-ID` (`?format=json` for one page)",
            responses={200: {"content": {"text/event-stream": {}}}})
async def task_events(task_id: str, request: Request, *, format: str = "sse", after: int = 0) -> Response:
    service = _service(request)
    await service.get(task_id, caller=await _viewer(request))
    last = last_event_id(request, default=max(0, after), max_digits=18)  # task event ids are 64-bit
    if format == "json":
        return ok(request, {"events": [event_view(e) for e in await service.events(task_id, after_id=last)]})
    if format != "sse":
        raise HearthError("invalid_request", "`format` is `sse` or `json`.", param="format")
    s = runtime(request).settings
    return EventStreamResponse(TaskEventFrames(service, task_id, after=last, heartbeat_s=s.sse_heartbeat_s))


@router.post("/tasks/{task_id}/cancel", summary="Cancel: `killed` at once if not running; a running task stops at "
             "its next check and its late result is discarded")
async def cancel_task(task_id: str, request: Request) -> Response:
    row = await _service(request).cancel(task_id, caller=await _viewer(request))
    return ok(request, task_view(row))


@router.post("/tasks/{task_id}/replay", summary="A new task with the same type and payload, linked by `replay_of`",
             status_code=202, responses={202: {"model": TaskAcceptedEnvelope}})
async def replay_task(task_id: str, request: Request) -> Response:
    row = await _service(request).replay(task_id, caller=await _viewer(request), request_id=request_id(request))
    return ok(request, _accepted(row, True), status=202)


@router.post("/tasks/{task_id}/callbacks/redeliver", summary="Deliver the task's callback again (after it gave up)")
async def redeliver(task_id: str, request: Request) -> Response:
    count = await _service(request).redeliver(task_id, caller=await _viewer(request))
    sender = runtime(request).tasks.sender
    if sender is not None:
        sender.wake.set()
    return ok(request, {"task_id": task_id, "deliveries": count})


@router.get("/callbacks", summary="Callback deliveries (admin): filter by `state` (pending, delivered, gave_up)")
async def list_deliveries(request: Request, *, state: str | None = None, task_id: str | None = None,
                          after_id: int | None = None, limit: int = 100) -> Response:
    require_admin(request)
    if not 1 <= limit <= 500:
        raise HearthError("invalid_request", "`limit` is between 1 and 500.", param="limit")
    rows = await _service(request).deliveries(state=state, task_id=task_id, after_id=after_id, limit=limit)
    return ok(request, {"deliveries": [delivery_view(r) for r in rows]})


_OVERRIDES = {"release": "queued", "skip": "skipped", "mark-succeeded": "mark_succeeded"}


@router.post("/tasks/{task_id}/{action}", summary="Operator (admin): `release` a held task to run again, `skip` "
             "it, or `mark-succeeded`; each needs `operator` and `reason`", openapi_extra=request_body(OperatorAction))
async def operator_override(task_id: str, action: str, request: Request) -> Response:
    require_admin(request)
    if action not in _OVERRIDES:
        raise HearthError("not_found", f"No task action `{action}`.")
    body = parse_model(OperatorAction, await read_json_object(request), "action")
    row = await _service(request).override(task_id, to=_OVERRIDES[action], operator=body.operator, reason=body.reason)
    return ok(request, task_view(row))
