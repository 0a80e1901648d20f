"""Liveness and readiness probes."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from sqlalchemy import text
from starlette.responses import Response

from hearth.api.deps import runtime

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


@router.get("/readyz", summary="Readiness: database, state backend, at least one enabled endpoint")
async def readyz(request: Request) -> Response:
    rt = runtime(request)
    checks: dict[str, str] = {}
    try:
        async with rt.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        await rt.state.ping()
        checks["state_backend"] = "ok"
    except Exception as exc:
        checks["state_backend"] = f"error: {type(exc).__name__}"
    n = rt.gateway.registry.healthy_endpoint_count()
    checks["endpoints"] = "ok" if n > 0 else "error: no enabled endpoint"
    ready = all(v == "ok" for v in checks.values())
    return Response(orjson.dumps({"status": "ready" if ready else "not_ready", "checks": checks}),
                    status_code=200 if ready else 503, media_type="application/json",
                    headers=None if ready else {"Retry-After": "5"})
