"""The human review queue: a decision a human owes, claimed with a lease, decided once — or expired.

One mechanism for workflows, tasks and documents alike. An item holds the thing to decide (``payload``),
its ``evidence`` and, optionally, a ``form`` (a JSON Schema) that a ``modify`` decision's payload must
satisfy. Waiting is a row: it holds no worker slot and no connection.

* **Claim** is a lease (``claim_until``): while it runs no other reviewer can claim or decide the item;
  two reviewers claiming at once — one wins (a compare-and-set UPDATE), the other gets 409
  ``review_claimed``. A lease that lapses lets anyone claim again; the holder may renew or release it.
* **Decide** (approve / modify / reject, with reviewer and reason) needs the decider's live claim and
  succeeds once; every later decision is 409 ``review_decided``.
* **A timer never decides.** An item not decided by ``expires_at`` becomes ``expired`` (logged as an
  alert, and — with ``escalation_url`` — an escalation owed in the same transaction, delivered by
  :mod:`hearth.workflows.review_escalations`); a decision after that is 409 ``review_expired``. Nothing
  here ever approves on its own. An item whose subject went away (its workflow run terminated, its step
  reset by an operator) is *withdrawn*: ``expired`` too, never approved.

Every action is appended to the item's ``history`` with who, why and when. This module owns ``review_items``.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.observability.logging import get_logger
from hearth.store.db import write_transaction
from hearth.store.tables import review_items
from hearth.workflows import review_escalations

log = get_logger("hearth.reviews")

STATES = ("pending", "claimed", "approved", "modified", "rejected", "expired")
DECISIONS = {"approve": "approved", "modify": "modified", "reject": "rejected"}
OPEN = ("pending", "claimed")
_c = review_items.c


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    """An item to raise (already shape-checked by the API, or built by a workflow step)."""

    title: str
    payload: dict[str, Any]
    timeout_s: float
    queue: str = "default"
    subject_kind: str = "external"
    subject_id: str | None = None
    evidence: Any = None
    form: dict[str, Any] | None = None
    caller: str | None = None
    item_id: str | None = None  # given by a caller that must raise an item once (raising it again returns it)


def check_form(form: Mapping[str, Any]) -> None:
    """A form must be a valid JSON Schema (checked when the item is raised, not when a reviewer submits)."""
    try:
        Draft202012Validator.check_schema(form)
    except Exception as exc:
        raise HearthError("invalid_request", f"`form` is not a valid JSON Schema: {str(exc).splitlines()[0]}",
                          param="form") from None


@dataclass(slots=True)
class ReviewService:
    engine: AsyncEngine
    clock: Clock = SYSTEM_CLOCK
    escalation_url: str | None = None  # where an expiry is announced (checked at start); None: only logged

    async def raise_item(self, r: ReviewRequest) -> Mapping[Any, Any]:
        if r.form is not None:
            check_form(r.form)
        now = self.clock.now()
        row = {"id": r.item_id or "rv_" + new_id(), "queue": r.queue, "caller": r.caller,
               "subject_kind": r.subject_kind, "subject_id": r.subject_id, "title": r.title, "payload": r.payload,
               "evidence": r.evidence if r.evidence is not None else [], "form": r.form, "state": "pending",
               "assignee": None, "claim_until": None, "decision": None, "decided_by": None, "reason": None,
               "history": [{"action": "raised", "at": now}], "created_at": now, "expires_at": now + r.timeout_s,
               "decided_at": None, "updated_at": now}
        try:
            async with write_transaction(self.engine) as conn:
                await conn.execute(review_items.insert().values(**row))
        except IntegrityError:
            if r.item_id is None:
                raise
        return await self.get(row["id"])

    async def get(self, item_id: str) -> Mapping[Any, Any]:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(review_items).where(_c.id == item_id))).mappings().first()
        if row is None:
            raise HearthError("review_not_found", f"No review item `{item_id}`.", param="review_id")
        return row

    async def get_many(self, item_ids: Sequence[str]) -> dict[str, Mapping[Any, Any]]:
        """The items found among ``item_ids``, by id, in a query per 500 (a workflow pass reads many)."""
        found: dict[str, Mapping[Any, Any]] = {}
        async with self.engine.connect() as conn:
            for i in range(0, len(item_ids), 500):
                for row in (await conn.execute(select(review_items).where(
                        _c.id.in_(item_ids[i:i + 500])))).mappings():
                    found[row["id"]] = row
        return found

    async def page(self, *, queue: str | None = None, state: str | None = None, assignee: str | None = None,
                   older_than_s: float | None = None, cursor: str | None = None,
                   limit: int = 50) -> tuple[Sequence[Mapping[Any, Any]], str | None]:
        """Oldest first (the queue order), keyset-paged by (created_at, id)."""
        stmt = select(review_items).order_by(_c.created_at, _c.id).limit(limit + 1)
        if queue is not None:
            stmt = stmt.where(_c.queue == queue)
        if state is not None:
            stmt = stmt.where(_c.state == state)
        if assignee is not None:
            stmt = stmt.where(_c.assignee == assignee)
        if older_than_s is not None:
            stmt = stmt.where(_c.created_at <= self.clock.now() - older_than_s)
        if cursor is not None:
            at, item_id = _decode_cursor(cursor)
            stmt = stmt.where(or_(_c.created_at > at, and_(_c.created_at == at, _c.id > item_id)))
        async with self.engine.connect() as conn:
            rows = list((await conn.execute(stmt)).mappings().all())
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, _encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if more and rows else None

    # ------------------------------------------------------------------ claim and decide

    async def claim(self, item_id: str, *, reviewer: str, lease_s: float) -> Mapping[Any, Any]:
        """Take (or renew) the item's lease; one reviewer at a time."""
        now = self.clock.now()
        free = or_(_c.state == "pending", _c.claim_until < now, _c.assignee == reviewer)
        where = and_(_c.id == item_id, _c.state.in_(OPEN), _c.expires_at > now, free)
        moved = await self._move(item_id, where, {"state": "claimed", "assignee": reviewer,
                                                  "claim_until": now + lease_s},
                                 {"action": "claimed", "reviewer": reviewer, "at": now})
        if not moved:
            raise await self._refusal(item_id, reviewer, now)
        return await self.get(item_id)

    async def release(self, item_id: str, *, reviewer: str) -> Mapping[Any, Any]:
        now = self.clock.now()
        where = and_(_c.id == item_id, _c.state == "claimed", _c.assignee == reviewer, _c.claim_until >= now)
        if not await self._move(item_id, where, {"state": "pending", "assignee": None, "claim_until": None},
                                {"action": "released", "reviewer": reviewer, "at": now}):
            raise await self._refusal(item_id, reviewer, now, deciding=True)
        return await self.get(item_id)

    async def decide(self, item_id: str, *, reviewer: str, decision: str, reason: str,
                     payload: dict[str, Any] | None = None) -> Mapping[Any, Any]:
        """Approve, modify (``payload`` checked against the item's form) or reject — once, under a live claim."""
        if decision not in DECISIONS:
            raise HearthError("invalid_request", f"`decision` is one of {', '.join(DECISIONS)}.", param="decision")
        item = await self.get(item_id)
        if decision == "modify":
            _check_against_form(item.get("form"), payload)
        elif payload is not None:
            raise HearthError("invalid_request", "Only a `modify` decision carries a payload.", param="payload")
        now = self.clock.now()
        where = and_(_c.id == item_id, _c.state == "claimed", _c.assignee == reviewer, _c.claim_until >= now,
                     _c.expires_at > now)
        values = {"state": DECISIONS[decision], "decision": payload, "decided_by": reviewer, "reason": reason,
                  "decided_at": now, "claim_until": None}
        if not await self._move(item_id, where, values, {"action": decision, "reviewer": reviewer,
                                                         "reason": reason, "at": now}):
            raise await self._refusal(item_id, reviewer, now, deciding=True)
        return await self.get(item_id)

    async def expire_due(self) -> int:
        """Expire every open item past its deadline — never approve it; the number expired."""
        now = self.clock.now()
        async with self.engine.connect() as conn:
            due = (await conn.execute(select(_c.id).where(_c.state.in_(OPEN), _c.expires_at <= now)
                                      .limit(500))).scalars().all()
        expired = 0
        for item_id in due:
            where = and_(_c.id == item_id, _c.state.in_(OPEN), _c.expires_at <= now)
            if await self._move(item_id, where, {"state": "expired", "claim_until": None},
                                {"action": "expired", "at": now}, then=self._escalation(item_id, now)):
                expired += 1
                log.warning("review_expired", review_id=item_id, alert=True)
        return expired

    async def expiry_by_queue(self, *, now: float, lead_s: float, expired_since: float
                              ) -> tuple[dict[str, tuple[int, float]], dict[str, int]]:
        """Per queue: open items expiring within ``lead_s`` (how many, the earliest deadline), and items that
        expired undecided in ``(expired_since, now]`` (how many). Both read the expiry index's range."""
        expiring: dict[str, tuple[int, float]] = {}
        expired: dict[str, int] = {}
        async with self.engine.connect() as conn:
            for queue, count, first in (await conn.execute(
                    select(_c.queue, func.count(), func.min(_c.expires_at))
                    .where(_c.expires_at > now, _c.expires_at <= now + lead_s, _c.state.in_(OPEN))
                    .group_by(_c.queue))).all():
                expiring[str(queue)] = (int(count), float(first))
            for queue, count in (await conn.execute(
                    select(_c.queue, func.count())
                    .where(_c.expires_at > expired_since, _c.expires_at <= now, _c.state == "expired")
                    .group_by(_c.queue))).all():
                expired[str(queue)] = int(count)
        return expiring, expired

    async def withdraw(self, item_id: str, *, operator: str, reason: str) -> bool:
        """Take back an open item whose subject went away: it ends ``expired`` — never approved — with
        ``withdrawn`` in its history (no escalation: nobody owes the decision any more). False if it was no
        longer open."""
        now = self.clock.now()
        where = and_(_c.id == item_id, _c.state.in_(OPEN))
        return await self._move(item_id, where, {"state": "expired", "claim_until": None},
                                {"action": "withdrawn", "reviewer": operator, "reason": reason, "at": now})

    # ------------------------------------------------------------------ the one writer of an item's state

    def _escalation(self, item_id: str, now: float) -> Callable[[AsyncConnection], Awaitable[None]] | None:
        url = self.escalation_url
        if url is None:
            return None

        async def owe(conn: AsyncConnection) -> None:
            await review_escalations.schedule(conn, item_id, url, now=now)

        return owe

    async def _move(self, item_id: str, where: Any, values: dict[str, Any], event: dict[str, Any], *,
                    then: Callable[[AsyncConnection], Awaitable[None]] | None = None) -> bool:
        """The compare-and-set of an item's state with its history event; ``then`` runs in the same transaction
        when the move happened (an expiry's escalation: both are written, or neither)."""
        async with write_transaction(self.engine) as conn:
            history = await self._history(conn, item_id)
            result = await conn.execute(update(review_items).where(where).values(
                **values, history=[*history, event], updated_at=event["at"]))
            if result.rowcount == 1 and then is not None:
                await then(conn)
            return result.rowcount == 1

    async def _history(self, conn: AsyncConnection, item_id: str) -> list[dict[str, Any]]:
        found = (await conn.execute(select(_c.history).where(_c.id == item_id))).scalar()
        return list(found or [])

    async def _refusal(self, item_id: str, reviewer: str, now: float, *, deciding: bool = False) -> HearthError:
        item = await self.get(item_id)
        if item["state"] == "expired" or (item["state"] in OPEN and item["expires_at"] <= now):
            return HearthError("review_expired", details={"expired_at": item["expires_at"]})
        if item["state"] not in OPEN:
            return HearthError("review_decided", details={"state": item["state"], "decided_by": item["decided_by"]})
        if item["state"] == "claimed" and item["assignee"] != reviewer and (item["claim_until"] or 0) >= now:
            return HearthError("review_claimed", details={"assignee": item["assignee"],
                                                          "claim_until": item["claim_until"]})
        return HearthError("review_not_claimed" if deciding else "review_claimed")


def _check_against_form(form: Mapping[str, Any] | None, payload: dict[str, Any] | None) -> None:
    if payload is None:
        raise HearthError("invalid_request", "A `modify` decision carries the modified `payload`.", param="payload")
    if form is None:
        return
    errors = sorted(Draft202012Validator(form).iter_errors(payload), key=lambda e: list(e.absolute_path))
    if errors:
        raise HearthError("invalid_request", "The payload does not satisfy the item's form.", param="payload",
                          details={"errors": [{"path": "/".join(map(str, e.absolute_path)), "message": e.message}
                                              for e in errors[:20]]})


def _encode_cursor(at: float, item_id: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([at, item_id])).decode()


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        at, item_id = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
        return float(at), str(item_id)
    except Exception:
        raise HearthError("invalid_request", "`cursor` is not one this API gave out.", param="cursor") from None
