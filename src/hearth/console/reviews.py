"""The review queue: a keyset-paged list (oldest first), one item with its payload, evidence and form
shown, and the reviewer's claim, release and decision (operator role; the signed-in user is the reviewer,
so only the claim's holder can decide — the review service's rule)."""

from __future__ import annotations

from typing import Any, Final

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import ConsoleRefused, checked_form, require
from hearth.console.render import page, redirect
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.workflows.reviews import STATES

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
log = get_logger("hearth.console")
DECISIONS: Final = ("approve", "modify", "reject")
CLAIM_S: Final = 900.0


@router.get("/reviews", include_in_schema=False)
async def reviews(request: Request) -> Response:
    console = await require(request)
    q = request.query_params
    filters = {"state": q.get("state") or None, "queue": q.get("queue") or None, "assignee": q.get("assignee") or None}
    if filters["state"] not in (None, *STATES):
        raise ConsoleRefused(400, "Unknown review state.")
    try:
        rows, next_cursor = await runtime(request).reviews.page(
            queue=filters["queue"], state=filters["state"], assignee=filters["assignee"],
            cursor=q.get("cursor") or None, limit=50)
    except HearthError as exc:
        raise ConsoleRefused(400, exc.message) from exc
    return page(request, "reviews.html", console, rows=rows, next_cursor=next_cursor, filters=filters,
                states=STATES)


@router.get("/reviews/{review_id}", include_in_schema=False)
async def review(review_id: str, request: Request) -> Response:
    console = await require(request)
    try:
        item = await runtime(request).reviews.get(review_id)
    except HearthError as exc:
        raise ConsoleRefused(exc.status, exc.message) from exc
    now = runtime(request).reviews.clock.now()
    mine = item["state"] == "claimed" and item["assignee"] == console.user and (item["claim_until"] or 0) >= now
    return page(request, "review.html", console, item=item, mine=mine, decisions=DECISIONS)


def _payload(form: dict[str, str]) -> dict[str, Any] | None:
    text = form.get("payload", "").strip()
    if form.get("decision") != "modify" or not text:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"The modified payload is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError("The modified payload is a JSON object.")
    return value


@router.post("/reviews/{review_id}/{action}", include_in_schema=False)
async def act(review_id: str, action: str, request: Request) -> Response:
    console = await require(request, "operator")
    form = await checked_form(request, console)
    back = f"/console/reviews/{review_id}"
    service = runtime(request).reviews
    try:
        if action == "claim":
            await service.claim(review_id, reviewer=console.user, lease_s=CLAIM_S)
            notice = "Claimed: it is yours to decide for 15 minutes."
        elif action == "release":
            await service.release(review_id, reviewer=console.user)
            notice = "Released."
        elif action == "decide":
            decision, reason = form.get("decision", ""), form.get("reason", "").strip()
            if decision not in DECISIONS:
                return redirect(back, error="Choose approve, modify or reject.")
            if not reason:
                return redirect(back, error="A reason is required.")
            await service.decide(review_id, reviewer=console.user, decision=decision, reason=reason[:2000],
                                 payload=_payload(form))
            notice = f"Decided: {decision}."
        else:
            raise ConsoleRefused(404, "No such review action.")
    except ValueError as exc:
        return redirect(back, error=str(exc))
    except HearthError as exc:
        return redirect(back, error=exc.message)
    log.info("console_review_action", user=console.user, review_id=review_id, action=action)
    return redirect(back, notice=notice)
