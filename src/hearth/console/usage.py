"""The callers & usage page: calls, tokens, cost, error rate and p95 latency per caller (or model, or endpoint)
over a window, from the request-log rollups — the same service function as ``GET /api/v1/admin/usage``
(:func:`hearth.observability.rollup_reports.usage_report`). Each caller links to its budgets and its calls."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import require
from hearth.console.render import page
from hearth.observability.rollup_reports import GROUPS, WINDOWS, usage_report

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
DEFAULT_WINDOW = "24h"


@router.get("/usage", include_in_schema=False)
async def usage(request: Request) -> Response:
    console = await require(request)
    window = request.query_params.get("window", DEFAULT_WINDOW)
    window = window if window in WINDOWS else DEFAULT_WINDOW
    group_by = request.query_params.get("group_by", "caller")
    group_by = group_by if group_by in GROUPS else "caller"
    report = await usage_report(runtime(request).engine, window, group_by)
    return page(request, "usage.html", console, report=report, window=window, windows=list(WINDOWS),
                group_by=group_by, groups=GROUPS)
