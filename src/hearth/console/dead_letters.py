"""The dead-letter pages: a keyset-paged list with filters, one letter with its history, and the operator's
acknowledge and redrive (operator role; the signed-in user is the operator, a reason is required)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import ConsoleRefused, checked_form, require
from hearth.console.render import page, redirect
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.tasks.dead_letters import SEVERITIES, STATUSES
from hearth.tasks.views import dead_letter_view

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
log = get_logger("hearth.console")


@router.get("/dead-letters", include_in_schema=False)
async def dead_letters(request: Request) -> Response:
    console = await require(request)
    q = request.query_params
    filters = {"status": q.get("status") or None, "severity": q.get("severity") or None,
               "task_type": q.get("task_type") or None}
    if filters["status"] not in (None, *STATUSES) or filters["severity"] not in (None, *SEVERITIES):
        raise ConsoleRefused(400, "Unknown status or severity.")
    try:
        rows, next_cursor = await runtime(request).tasks.service.dead_letter_page(
            status=filters["status"], severity=filters["severity"], task_type=filters["task_type"],
            cursor=q.get("cursor") or None, limit=50)
    except HearthError as exc:
        raise ConsoleRefused(400, exc.message) from exc
    return page(request, "dead_letters.html", console, rows=[dead_letter_view(r) for r in rows],
                next_cursor=next_cursor, filters=filters, statuses=STATUSES, severities=SEVERITIES)


@router.get("/dead-letters/{task_id}", include_in_schema=False)
async def dead_letter(task_id: str, request: Request) -> Response:
    console = await require(request)
    try:
        letter = dead_letter_view(await runtime(request).tasks.service.dead_letter(task_id))
    except HearthError as exc:
        raise ConsoleRefused(exc.status, exc.message) from exc
    return page(request, "dead_letter.html", console, letter=letter)


@router.post("/dead-letters/{task_id}/{action}", include_in_schema=False)
async def act(task_id: str, action: str, request: Request) -> Response:
    console = await require(request, "operator")
    form = await checked_form(request, console)
    back = f"/console/dead-letters/{task_id}"
    reason = form.get("reason", "").strip()
    if action not in ("acknowledge", "redrive"):
        raise ConsoleRefused(404, "No such dead-letter action.")
    if not reason:
        return redirect(back, error="A reason is required.")
    service = runtime(request).tasks.service
    try:
        run = service.redrive if action == "redrive" else service.acknowledge
        await run(task_id, operator=console.user, reason=reason[:2000])
    except HearthError as exc:
        return redirect(back, error=exc.message)
    log.info("console_dead_letter_action", user=console.user, task_id=task_id, action=action)
    return redirect(back, notice=f"Dead letter {'redriven' if action == 'redrive' else 'acknowledged'}.")
