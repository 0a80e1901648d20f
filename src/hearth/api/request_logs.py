"""``GET /api/v1/request-logs``: recent gateway calls with filters and paging (admin token)."""

from __future__ import annotations

from datetime import datetime

from fastapi import Depends, Query, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES
from hearth.api.deps import require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.request_log_schemas import RequestLogEnvelope
from hearth.api.route_defaults import api_router
from hearth.observability.request_log import query_request_logs

router = api_router(prefix="/api/v1", tags=["observability"], dependencies=[Depends(require_admin)])


@router.get("/request-logs", summary="List request logs, newest first",
            responses={200: {"model": RequestLogEnvelope}, **ADMIN_ERROR_RESPONSES})
async def list_request_logs(
    request: Request,
    caller: str | None = None,
    model: str | None = None,
    endpoint: str | None = None,
    *, status: int | None = None,
    error_code: str | None = None,
    request_id: str | None = None,
    route: str | None = None,
    end_user: str | None = None,
    task_id: str | None = Query(default=None, description="the rows of one task's model calls"),
    since: datetime | None = Query(default=None, description="ISO-8601, inclusive"),
    until: datetime | None = Query(default=None, description="ISO-8601, exclusive"),
    limit: int = Query(default=50, ge=1, le=500),
    offset: int = Query(default=0, ge=0),
) -> Response:
    filters = {"caller": caller, "model": model, "endpoint": endpoint, "status": status, "error_code": error_code,
               "request_id": request_id, "route": route, "end_user": end_user, "task_id": task_id}
    total, capped, items = await query_request_logs(runtime(request).engine, filters, since, until, limit=limit,
                                                    offset=offset)
    return ok(request, {"total": total, "limit": limit, "offset": offset, "items": items, "total_capped": capped})
