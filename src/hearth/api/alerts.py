"""Alerts (admin): what was raised, its window's suppressed repeats and its delivery, newest first."""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES
from hearth.api.deps import require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.observability import alerts

router = api_router(prefix="/api/v1/admin/alerts", tags=["admin", "alerts"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)


@router.get("", summary="Alerts, newest first (filter by kind and delivery state; keyset `cursor`)")
async def list_alerts(request: Request, *, kind: str | None = None, state: str | None = None,
                      cursor: str | None = None, limit: int = 50) -> Response:
    if kind is not None and kind not in alerts.KINDS:
        raise HearthError("invalid_request", f"`kind` is one of {', '.join(alerts.KINDS)}.", param="kind")
    if state is not None and state not in alerts.STATES:
        raise HearthError("invalid_request", f"`state` is one of {', '.join(alerts.STATES)}.", param="state")
    if not 1 <= limit <= 500:
        raise HearthError("invalid_request", "`limit` is between 1 and 500.", param="limit")
    before: int | None = None
    if cursor is not None:
        if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 18:
            raise HearthError("invalid_request", "`cursor` is the `next_cursor` of a previous page.", param="cursor")
        before = int(cursor)
    rows = await alerts.page(runtime(request).engine, kind=kind, state=state, before_id=before, limit=limit)
    items = [{**alerts.alert_view(r), "delivery": {
        "state": r["state"], "attempts": r["attempts"], "next_at": r["next_at"], "last_status": r["last_status"],
        "last_error": r["last_error"], "delivered_at": r["delivered_at"]}} for r in rows]
    next_cursor = str(rows[-1]["id"]) if len(rows) == limit else None
    return ok(request, {"alerts": items, "next_cursor": next_cursor})
