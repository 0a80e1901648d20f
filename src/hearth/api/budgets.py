"""``GET /api/v1/budgets`` and ``GET /api/v1/usage``: limits, reservations, spend, remaining.

An admin token sees every caller (filter with ``caller=``); a caller key sees only its own caller.
"""

from __future__ import annotations

import hmac
from datetime import UTC, datetime
from typing import Literal

from fastapi import Query, Request
from starlette.responses import Response

from hearth.api.deps import authenticate_caller, runtime
from hearth.api.envelope import ok
from hearth.api.route_defaults import api_router
from hearth.auth.internal import bearer_token
from hearth.errors import HearthError
from hearth.gateway.budget_report import budget_status
from hearth.observability.request_log import usage_summary
from hearth.state.base import StateUnavailable

router = api_router(prefix="/api/v1", tags=["budgets"])


async def _scope_caller(request: Request, caller: str | None) -> str | None:
    """The caller the request may see: any (admin) or only itself (caller key / internal token; signed,
    like every route, when the caller must sign)."""
    rt = runtime(request)
    token = bearer_token(request.headers)
    admin = rt.settings.admin_token
    if token is not None and admin and hmac.compare_digest(token.encode(), admin.encode()):
        return caller
    me = await authenticate_caller(request)
    if caller is not None and caller != me.name:
        raise HearthError("forbidden", "A caller key can only see its own budgets and usage.")
    return me.name


@router.get("/budgets", summary="Budgets that apply, with limit, used, reserved, spent and remaining")
async def list_budgets(request: Request, caller: str | None = None, tenant: str | None = None,
                       user: str | None = None) -> Response:
    who = await _scope_caller(request, caller)
    rt = runtime(request)
    try:
        items = await budget_status(rt.gateway.registry, rt.state, rt.engine, who, tenant=tenant, user=user)
    except StateUnavailable as exc:
        raise HearthError("state_backend_unavailable", retry_after=2) from exc
    return ok(request, {"items": items})


def _period_start(period: str, now: datetime) -> datetime | None:
    if period == "day":
        return datetime(now.year, now.month, now.day, tzinfo=UTC)
    if period == "month":
        return datetime(now.year, now.month, 1, tzinfo=UTC)
    return None


@router.get("/usage", summary="Requests, tokens and cost for a period, from the request logs")
async def usage(request: Request, caller: str | None = None, tenant: str | None = None, user: str | None = None,
                *, period: Literal["day", "month", "total"] = Query(default="day")) -> Response:
    who = await _scope_caller(request, caller)
    now = datetime.now(UTC)
    summary = await usage_summary(runtime(request).engine, _period_start(period, now), who, tenant, user=user)
    return ok(request, {"caller": who, "tenant": tenant, "user": user, "period": period, **summary})
