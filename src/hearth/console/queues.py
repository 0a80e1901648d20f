"""The queues page: per task queue, tasks queued, waiting and running, how long the oldest queued task has waited,
and the concurrency configured per worker process — the same report as ``GET /api/v1/admin/queues``
(:func:`hearth.observability.queue_report.queue_report`, index-backed counts of live tasks only)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import now_s, require
from hearth.console.render import page
from hearth.observability.queue_report import queue_report

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)


@router.get("/queues", include_in_schema=False)
async def queues(request: Request) -> Response:
    console = await require(request)
    rt = runtime(request)
    rows = await queue_report(rt.engine, rt.settings.task_queues, now=now_s(request))
    return page(request, "queues.html", console, rows=rows)
