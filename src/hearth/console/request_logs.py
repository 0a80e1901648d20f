"""The request-log pages: gateway and capability calls, newest first, keyset-paged on ``(created_at, id)``,
with filters; one call with its attempts (endpoint, status, error code, latency, in the order tried)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import ConsoleRefused, require
from hearth.console.render import page
from hearth.observability.request_log import request_log_page, request_log_row

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
PAGE: Final = 50
TEXT_FILTERS: Final = ("caller", "model", "endpoint", "route", "error_code", "request_id", "task_id")


def _cursor(text: str | None) -> tuple[datetime, int] | None:
    if not text:
        return None
    at, _, row_id = text.rpartition("~")
    try:
        parsed = datetime.fromisoformat(at)
        return parsed, int(row_id)
    except ValueError as exc:
        raise ConsoleRefused(400, "The page cursor is not valid: start from the first page.") from exc


@router.get("/request-logs", include_in_schema=False)
async def request_logs(request: Request) -> Response:
    console = await require(request)
    q = request.query_params
    shown: dict[str, Any] = {k: (q.get(k) or "").strip()[:256] or None for k in (*TEXT_FILTERS, "status")}
    filters: dict[str, Any] = {k: shown[k] for k in TEXT_FILTERS}
    if shown["status"] is not None:
        if not shown["status"].isdigit() or not 100 <= int(shown["status"]) <= 599:
            raise ConsoleRefused(400, "`status` is an HTTP status code.")
        filters["status"] = int(shown["status"])
    rows, last = await request_log_page(runtime(request).engine, filters, after=_cursor(q.get("cursor")),
                                        limit=PAGE)
    next_cursor = f"{last[0].isoformat()}~{last[1]}" if last else None
    return page(request, "request_logs.html", console, rows=rows, filters=shown, next_cursor=next_cursor)


@router.get("/request-logs/{row_id}", include_in_schema=False)
async def request_log(row_id: int, request: Request) -> Response:
    console = await require(request)
    row = await request_log_row(runtime(request).engine, row_id)
    if row is None:
        raise ConsoleRefused(404, f"No request log {row_id}.")
    return page(request, "request_log.html", console, row=row)
