"""``GET /api/v1/admin/usage``: calls, tokens, cost, error rate and p95 latency per caller, model or endpoint
over a window, from the request-log rollups (admin token) — what the console's usage page shows."""

from __future__ import annotations

from typing import Literal

from fastapi import Depends, Query, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES, OK
from hearth.api.deps import require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.route_defaults import api_router
from hearth.observability.rollup_reports import usage_report

router = api_router(prefix="/api/v1/admin/usage", tags=["admin", "observability"],
                   dependencies=[Depends(require_admin)], responses=ADMIN_ERROR_RESPONSES)


@router.get("", summary="Usage per caller, model or endpoint over a window (from the per-minute/hour rollups)",
            responses=OK)
async def usage(
    request: Request,
    window: Literal["15m", "1h", "6h", "24h", "7d", "30d"] = Query(default="24h", description="ends now; under "
                                                                   "a day reads minute rollups, else hour ones"),
    group_by: Literal["caller", "model", "endpoint"] = Query(default="caller"),
) -> Response:
    return ok(request, await usage_report(runtime(request).engine, window, group_by))
