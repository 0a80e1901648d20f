"""The task pages: every caller's tasks (filters: state, type, queue; keyset-paged, newest first), one task
with its attempts and events, and cancel or replay (operator role)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import request_id, runtime
from hearth.console.auth import ConsoleRefused, checked_form, require
from hearth.console.render import page, redirect
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.tasks.states import STATES
from hearth.tasks.views import event_view, task_view

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
log = get_logger("hearth.console")


@router.get("/tasks", include_in_schema=False)
async def tasks(request: Request) -> Response:
    console = await require(request)
    q = request.query_params
    filters = {"state": q.get("state") or None, "task_type": q.get("task_type") or None,
               "queue": q.get("queue") or None}
    if filters["state"] not in (None, *STATES):
        raise ConsoleRefused(400, "Unknown task state.")
    try:
        rows, next_cursor = await runtime(request).tasks.service.listing(
            caller=None, state=filters["state"], task_type=filters["task_type"], queue=filters["queue"],
            cursor=q.get("cursor") or None, limit=50)
    except HearthError as exc:
        raise ConsoleRefused(400, exc.message) from exc
    return page(request, "tasks.html", console, rows=[task_view(r) for r in rows], next_cursor=next_cursor,
                filters=filters, states=STATES)


@router.get("/tasks/{task_id}", include_in_schema=False)
async def task(task_id: str, request: Request) -> Response:
    console = await require(request)
    service = runtime(request).tasks.service
    try:
        row = await service.get(task_id, caller=None)
    except HearthError as exc:
        raise ConsoleRefused(exc.status, exc.message) from exc
    view = task_view(row, attempts=await service.attempts(task_id))
    events = [event_view(e) for e in await service.events(task_id, after_id=0, limit=200)]
    return page(request, "task.html", console, task=view, events=events)


@router.post("/tasks/{task_id}/cancel", include_in_schema=False)
async def cancel(task_id: str, request: Request) -> Response:
    console = await require(request, "operator")
    await checked_form(request, console)
    back = f"/console/tasks/{task_id}"
    try:
        await runtime(request).tasks.service.cancel(task_id, caller=None)
    except HearthError as exc:
        return redirect(back, error=exc.message)
    log.info("console_task_cancelled", user=console.user, task_id=task_id)
    return redirect(back, notice="Cancel requested.")


@router.post("/tasks/{task_id}/replay", include_in_schema=False)
async def replay(task_id: str, request: Request) -> Response:
    """A new task with the same type and payload, linked by ``replay_of``; the page moves to it."""
    console = await require(request, "operator")
    await checked_form(request, console)
    try:
        row = await runtime(request).tasks.service.replay(task_id, caller=None, request_id=request_id(request))
    except HearthError as exc:
        return redirect(f"/console/tasks/{task_id}", error=exc.message)
    log.info("console_task_replayed", user=console.user, task_id=task_id, new_task_id=row["id"])
    return redirect(f"/console/tasks/{row['id']}", notice=f"Replay of {task_id}.")
