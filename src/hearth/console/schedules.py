"""The schedule pages: schedules by caller and name with their next fire time, one schedule with what became
of its recent occurrences, and pause, resume and trigger-now (operator role: they act on tasks)."""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import ConsoleRefused, checked_form, require
from hearth.console.render import page, redirect
from hearth.errors import HearthError
from hearth.observability.logging import get_logger

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
log = get_logger("hearth.console")
PAGE: Final = 50
MAX_SCHEDULES: Final = 1000
ACTIONS: Final = ("pause", "resume", "trigger")


@router.get("/schedules", include_in_schema=False)
async def schedules(request: Request) -> Response:
    """Schedules are configuration (few): read at most :data:`MAX_SCHEDULES`, paged here by (caller, name)."""
    console = await require(request)
    after = tuple(request.query_params.get("after", "").split("/", 1)) if request.query_params.get("after") else None
    rows = await runtime(request).schedules.page(caller=None, limit=MAX_SCHEDULES)
    rows = [r for r in rows if after is None or (r["caller"], r["name"]) > after]
    shown = rows[:PAGE]
    last = f"{shown[-1]['caller']}/{shown[-1]['name']}" if len(rows) > PAGE else None
    return page(request, "schedules.html", console, rows=shown, next_after=last)


@router.get("/schedules/{schedule_id}", include_in_schema=False)
async def schedule(schedule_id: str, request: Request) -> Response:
    console = await require(request)
    service = runtime(request).schedules
    try:
        row = await service.get(schedule_id)
        occurrences = await service.occurrences(schedule_id, limit=50)
    except HearthError as exc:
        raise ConsoleRefused(exc.status, exc.message) from exc
    return page(request, "schedule.html", console, s=row, occurrences=occurrences)


@router.post("/schedules/{schedule_id}/{action}", include_in_schema=False)
async def act(schedule_id: str, action: str, request: Request) -> Response:
    console = await require(request, "operator")
    await checked_form(request, console)
    if action not in ACTIONS:
        raise ConsoleRefused(404, "No such schedule action.")
    back = f"/console/schedules/{schedule_id}"
    service = runtime(request).schedules
    try:
        if action == "trigger":
            occurrence = await service.trigger(schedule_id)
            notice = f"Fired now: task {occurrence['task_id'] or '(none)'}."
        else:
            await service.set_paused(schedule_id, action == "pause")
            notice = "Paused." if action == "pause" else "Resumed: planning starts again from now."
    except HearthError as exc:
        return redirect(back, error=exc.message)
    log.info("console_schedule_action", user=console.user, schedule_id=schedule_id, action=action)
    return redirect(back, notice=notice)
