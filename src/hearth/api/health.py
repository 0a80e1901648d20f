"""Liveness and readiness probes."""

from __future__ import annotations

import orjson
from fastapi import Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.api.route_defaults import api_router
from hearth.readiness import readiness

router = api_router(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


@router.get("/readyz", summary="Readiness: can this process admit calls? (each dependency's state)")
async def readyz(request: Request) -> Response:
    """200 ``ready`` or ``degraded`` (a database outage: logs delayed, strict-budget calls refused,
    others served), 503 ``not_ready`` (state backend down, or no enabled endpoint)."""
    report = await readiness(runtime(request))
    return Response(orjson.dumps(report.as_dict()), status_code=report.http_status, media_type="application/json",
                    headers={"Retry-After": "5"} if report.http_status == 503 else None)
