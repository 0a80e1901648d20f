"""Dead letters: a task's terminal failure, kept until an operator acknowledges or redrives it.

A dead letter opens (``OPEN``) in the transaction that fails its task, with the failure stage, the
error code and a severity P1/P2/P3 chosen by the first matching rule (:func:`severity`). Operators
``acknowledge`` it (seen, nothing to do) or ``redrive`` it (the task is queued for a new attempt,
``REDRIVEN``); a redriven task that then succeeds marks it ``RESOLVED``, one that fails again opens it
again. Every action keeps who did it, why and when, in ``history``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hearth.store.tables import dead_letters
from hearth.tasks.retry import TRANSIENT_CODES

STATUSES = ("OPEN", "ACKNOWLEDGED", "REDRIVEN", "RESOLVED")
SEVERITIES = ("P1", "P2", "P3")
_P1_CODES = frozenset({"upstream_auth_failed", "internal_error", "worker_lost", "budget_exhausted"})


@dataclass(frozen=True, slots=True)
class SeverityRule:
    """``severity`` for failures matching every field given (``None`` matches anything)."""

    severity: str
    error_code: str | None = None
    task_type: str | None = None
    failure_stage: str | None = None

    def matches(self, *, error_code: str | None, task_type: str, failure_stage: str | None) -> bool:
        return ((self.error_code is None or self.error_code == error_code)
                and (self.task_type is None or self.task_type == task_type)
                and (self.failure_stage is None or self.failure_stage == failure_stage))


def severity(rules: Sequence[SeverityRule], *, error_code: str | None, task_type: str,
             failure_stage: str | None) -> str:
    """The first matching rule's severity; else P1 for credentials, bugs and lost workers, P2 for an
    upstream that stayed down through every retry, P3 for bad input."""
    for rule in rules:
        if rule.matches(error_code=error_code, task_type=task_type, failure_stage=failure_stage):
            return rule.severity
    if error_code in _P1_CODES or error_code is None:
        return "P1"
    if error_code in TRANSIENT_CODES:
        return "P2"
    return "P3"


async def open_many(conn: AsyncConnection, letters: Sequence[Mapping[Any, Any]], *, now: float) -> list[str]:
    """Open (or re-open) a dead letter per failed task; returns the ids opened."""
    if not letters:
        return []
    ids = [str(d["task_id"]) for d in letters]
    existing = {r["task_id"]: r for r in (await conn.execute(
        select(dead_letters).where(dead_letters.c.task_id.in_(ids)))).mappings().all()}
    fresh = []
    for d in letters:
        old = existing.get(d["task_id"])
        if old is None:
            fresh.append({**d, "status": "OPEN", "opened_at": now, "updated_at": now, "history": []})
            continue
        history = [*old["history"], {"action": "reopened", "at": now, "error_code": d.get("error_code")}]
        await conn.execute(update(dead_letters).where(dead_letters.c.task_id == d["task_id"]).values(
            status="OPEN", severity=d["severity"], error_code=d.get("error_code"),
            failure_stage=d.get("failure_stage"), message=d.get("message"), attempts=d["attempts"],
            updated_at=now, history=history))
    if fresh:
        await conn.execute(dead_letters.insert(), fresh)
    return ids


async def resolve_redriven(conn: AsyncConnection, task_ids: Sequence[str], *, now: float) -> None:
    """Mark the dead letters of redriven tasks that have now succeeded as RESOLVED."""
    if not task_ids:
        return
    rows = (await conn.execute(select(dead_letters.c.task_id, dead_letters.c.history).where(
        dead_letters.c.task_id.in_(list(task_ids)), dead_letters.c.status == "REDRIVEN"))).all()
    for task_id, history in rows:
        await conn.execute(update(dead_letters).where(dead_letters.c.task_id == task_id).values(
            status="RESOLVED", updated_at=now, history=[*history, {"action": "resolved", "at": now}]))


async def get(conn: AsyncConnection, task_id: str) -> Mapping[Any, Any] | None:
    return (await conn.execute(select(dead_letters).where(dead_letters.c.task_id == task_id))).mappings().first()


async def record_action(conn: AsyncConnection, task_id: str, *, action: str, status: str, operator: str, reason: str,
                        now: float, expect: Sequence[str]) -> Mapping[Any, Any] | None:
    """Apply an operator's action if the letter is in one of ``expect``; the updated row, or None."""
    row = (await conn.execute(select(dead_letters).where(dead_letters.c.task_id == task_id)
                              .with_for_update())).mappings().first()
    if row is None or row["status"] not in expect:
        return None
    history = [*row["history"], {"action": action, "operator": operator, "reason": reason, "at": now}]
    await conn.execute(update(dead_letters).where(dead_letters.c.task_id == task_id).values(
        status=status, updated_at=now, history=history))
    return {**row, "status": status, "updated_at": now, "history": history}


async def listing(conn: AsyncConnection, *, status: str | None, severity_: str | None, task_type: str | None,
                  before: tuple[float, str] | None, limit: int) -> Sequence[Mapping[Any, Any]]:
    """Newest first, keyset-paged by (opened_at, task_id)."""
    t = dead_letters
    stmt = select(t)
    if status:
        stmt = stmt.where(t.c.status == status)
    if severity_:
        stmt = stmt.where(t.c.severity == severity_)
    if task_type:
        stmt = stmt.where(t.c.task_type == task_type)
    if before is not None:
        stmt = stmt.where((t.c.opened_at < before[0]) | ((t.c.opened_at == before[0]) & (t.c.task_id < before[1])))
    stmt = stmt.order_by(t.c.opened_at.desc(), t.c.task_id.desc()).limit(limit)
    return list((await conn.execute(stmt)).mappings().all())
