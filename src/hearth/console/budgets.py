"""The budgets page: every configured budget for every caller it applies to (or one caller's), with its
limit, used (live), spent, reserved and remaining in the current period — bounded by the configuration
(budgets × callers), read from the state backend's counters and the ledger's balances."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import ConsoleRefused, require
from hearth.console.render import page
from hearth.gateway.budget_report import budget_status
from hearth.state.base import StateUnavailable

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)


@router.get("/budgets", include_in_schema=False)
async def budgets(request: Request) -> Response:
    console = await require(request)
    rt = runtime(request)
    caller = (request.query_params.get("caller") or "").strip() or None
    if caller is not None and caller not in rt.gateway.registry.callers_by_name:
        raise ConsoleRefused(404, f"No caller named {caller}.")
    try:
        items = await budget_status(rt.gateway.registry, rt.state, rt.engine, caller, tenant=None, user=None)
    except StateUnavailable as exc:
        raise ConsoleRefused(503, "The state backend is unavailable: live budget use cannot be read.") from exc
    for item in items:
        limit = float(item["limit"] or 0)
        item["share"] = min(1.0, float(item["used"] or 0) / limit) if limit > 0 else 0.0
    return page(request, "budgets.html", console, rows=items, caller=caller,
                callers=sorted(rt.gateway.registry.callers_by_name))
