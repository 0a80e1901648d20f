"""The task engine's operations, as the API (and in-process users) call them.

Submission is one transaction per request, single or batch (up to :data:`MAX_BATCH`): the idempotency
lookup, the bounded-queue check and the INSERT of every task happen together, so a batch is queued
whole or not at all. The same ``(caller, idempotency_key)`` always names the same task, whatever its
state; an explicit replay makes a new task linked by ``replay_of``.

Callers see their own tasks; operator actions (dead letters, held tasks) are the admin API's.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.observability import tracing
from hearth.store.db import write_transaction
from hearth.store.tables import task_attempts, task_events, tasks
from hearth.tasks import callbacks, dead_letters
from hearth.tasks import queue as task_queue
from hearth.tasks.admission import AdmissionCounts, QueueLimits, count_requeued
from hearth.tasks.notify import Wakeups
from hearth.tasks.queue import CANCEL_CHANNEL, fair_key
from hearth.tasks.retry import DEFAULT_POLICY, RetryPolicy
from hearth.tasks.states import TERMINAL
from hearth.tasks.terminal import TerminalRules, after_moves
from hearth.tasks.transitions import Move, apply
from hearth.tasks.types import TaskType, TaskTypes

MAX_BATCH = 1000


@dataclass(slots=True)
class Submission:
    """One task to submit, parsed and authenticated by the API."""

    task_type: str
    payload: dict[str, Any]
    caller: str
    priority: int = 0
    queue: str | None = None
    idempotency_key: str | None = None
    callback_url: str | None = None
    run_after: float | None = None
    tenant: str | None = None
    end_user: str | None = None
    request_id: str | None = None
    replay_of: str | None = None


@dataclass(slots=True)
class TaskService:
    engine: AsyncEngine
    types: TaskTypes
    queues: Mapping[str, QueueLimits]
    wakeups: Wakeups
    guard: AddressGuard
    callbacks_enabled: bool = True
    rules: TerminalRules = field(default_factory=TerminalRules)
    default_retry: RetryPolicy = DEFAULT_POLICY
    clock: Clock = SYSTEM_CLOCK
    counts: AdmissionCounts = field(default_factory=AdmissionCounts)  # this process's last queue counts

    # ------------------------------------------------------------------ submission

    async def submit(self, subs: Sequence[Submission]) -> list[tuple[Mapping[Any, Any], bool]]:
        """Queue ``subs`` in one transaction; (task row, created) for each, in order."""
        if not 1 <= len(subs) <= MAX_BATCH:
            raise HearthError("invalid_request", f"Submit between 1 and {MAX_BATCH} tasks at once.",
                              param="tasks")
        rows = [await self._row(i, s, batch=len(subs) > 1) for i, s in enumerate(subs)]
        for attempt in range(2):
            try:
                return await self._insert(subs, rows)
            except IntegrityError:  # a parallel submission took one of our idempotency keys first
                if attempt:
                    raise HearthError("conflict", "A parallel submission used the same idempotency key; "
                                      "submit again.") from None
        raise AssertionError("unreachable")

    def check_target(self, task_type: str, payload: dict[str, Any], *, queue: str | None,
                     where: str = "") -> tuple[TaskType, str, dict[str, Any]]:
        """What :meth:`submit` refuses about a task's type, queue and payload — also for a task submitted
        later (a schedule's target is checked when it is defined, not first when it fires): the type, the
        queue and the payload as the type validated it."""
        ttype = self.types.get(task_type)
        if ttype is None:
            raise HearthError("task_type_unknown", f"No task type `{task_type}`; known: "
                              f"{', '.join(self.types.names())}.", param=f"{where}task_type",
                              details={"known": self.types.names()})
        queue = queue or ttype.queue
        if queue not in self.queues:
            raise HearthError("invalid_request", f"No queue `{queue}`; configured: {', '.join(sorted(self.queues))}.",
                              param=f"{where}queue")
        return ttype, queue, ttype.validate(payload) if ttype.validate else payload

    async def submit_in(self, conn: AsyncConnection, sub: Submission) -> dict[str, Any]:
        """Queue one task inside the caller's own transaction, so the row that needs the task and the task are
        written together or not at all (no idempotency lookup: the caller's row is the key). Once that
        transaction committed, :meth:`Wakeups.poke` the task's queue to wake this process's worker at once."""
        row = await self._row(0, sub, batch=False)
        await task_queue.enqueue(conn, [row], now=self.clock.now(), limits=self.queues, counts=self.counts)
        return row

    async def _row(self, index: int, s: Submission, *, batch: bool) -> dict[str, Any]:
        where = f"tasks[{index}]." if batch else ""
        ttype, queue, payload = self.check_target(s.task_type, s.payload, queue=s.queue, where=where)
        if s.callback_url is not None:
            if not self.callbacks_enabled:
                raise HearthError("callback_url_refused", "Callbacks are off: the operator has not set "
                                  "HEARTH_CALLBACK_SIGNING_KEY, without which a receiver could not trust them.",
                                  param=f"{where}callback_url")
            await callbacks.check_callback_url(self.guard, s.callback_url)
        now = self.clock.now()
        run_after = max(now, s.run_after) if s.run_after is not None else now
        policy = ttype.retry or self.default_retry
        return {"id": "tsk_" + new_id(), "task_type": s.task_type, "queue": queue, "priority": s.priority,
                "state": "waiting" if run_after > now else "queued", "caller": s.caller, "tenant": s.tenant,
                "end_user": s.end_user, "fair_key": fair_key(s.caller, s.tenant, s.end_user), "fair_seq": 0,
                "payload": payload, "progress": 0, "attempt": 0, "max_attempts": policy.max_attempts,
                "repeat_safe": ttype.repeat_safe, "run_after": run_after, "cancel_requested": False,
                "idempotency_key": s.idempotency_key, "replay_of": s.replay_of, "callback_url": s.callback_url,
                "request_id": s.request_id, "created_at": now, "updated_at": now,
                "trace_parent": tracing.current_traceparent()}

    async def _insert(self, subs: Sequence[Submission],
                      rows: list[dict[str, Any]]) -> list[tuple[Mapping[Any, Any], bool]]:
        out: list[tuple[Mapping[Any, Any], bool] | None] = [None] * len(rows)
        async with write_transaction(self.engine) as conn:
            keyed = {(s.caller, s.idempotency_key) for s in subs if s.idempotency_key}
            existing = await self._by_keys(conn, keyed)
            fresh: list[dict[str, Any]] = []
            first_of: dict[tuple[str, str], dict[str, Any]] = {}
            for i, (s, row) in enumerate(zip(subs, rows, strict=True)):
                key = (s.caller, s.idempotency_key) if s.idempotency_key else None
                if key is not None and key in existing:
                    out[i] = (existing[key], False)
                elif key is not None and key in first_of:
                    out[i] = (first_of[key], False)
                else:
                    fresh.append(row)
                    out[i] = (row, True)
                    if key is not None:
                        first_of[key] = row
            if fresh:
                await task_queue.enqueue(conn, fresh, now=self.clock.now(), limits=self.queues, counts=self.counts)
        for q, lowest in task_queue.lowest_keys(fresh).items():
            self.wakeups.poke(q, lowest)
        return [o for o in out if o is not None]

    async def _by_keys(self, conn: AsyncConnection, keys: set[tuple[str, str]]) -> dict[tuple[str, str], Any]:
        found: dict[tuple[str, str], Any] = {}
        by_caller: dict[str, list[str]] = {}
        for caller, key in keys:
            by_caller.setdefault(caller, []).append(key)
        for caller, names in by_caller.items():
            for i in range(0, len(names), 500):
                stmt = select(tasks).where(tasks.c.caller == caller, tasks.c.idempotency_key.in_(names[i:i + 500]))
                for r in (await conn.execute(stmt)).mappings().all():
                    found[(caller, r["idempotency_key"])] = r
        return found

    # ------------------------------------------------------------------ reading

    async def get(self, task_id: str, *, caller: str | None) -> Mapping[Any, Any]:
        """The task (``caller`` None: any caller's — the admin view); ``task_not_found`` otherwise."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(tasks).where(tasks.c.id == task_id))).mappings().first()
        if row is None or (caller is not None and row["caller"] != caller):
            raise HearthError("task_not_found", f"No task `{task_id}`.", param="task_id")
        return row

    async def get_many(self, task_ids: Sequence[str]) -> dict[str, Mapping[Any, Any]]:
        """The tasks found among ``task_ids`` (any caller's), by id, in a query per 500: a workflow pass
        reads the tasks of many runs' steps at once."""
        found: dict[str, Mapping[Any, Any]] = {}
        async with self.engine.connect() as conn:
            for i in range(0, len(task_ids), 500):
                for row in (await conn.execute(select(tasks).where(tasks.c.id.in_(task_ids[i:i + 500])))).mappings():
                    found[row["id"]] = row
        return found

    async def attempts(self, task_id: str) -> Sequence[Mapping[Any, Any]]:
        async with self.engine.connect() as conn:
            return list((await conn.execute(select(task_attempts).where(task_attempts.c.task_id == task_id)
                                            .order_by(task_attempts.c.attempt))).mappings().all())

    async def events(self, task_id: str, *, after_id: int, limit: int = 500) -> Sequence[Mapping[Any, Any]]:
        async with self.engine.connect() as conn:
            stmt = (select(task_events).where(task_events.c.task_id == task_id, task_events.c.id > after_id)
                    .order_by(task_events.c.id).limit(limit))
            return list((await conn.execute(stmt)).mappings().all())

    async def listing(self, *, caller: str | None, state: str | None = None, task_type: str | None = None,
                      queue: str | None = None, updated_since: float | None = None, cursor: str | None = None,
                      limit: int = 50) -> tuple[Sequence[Mapping[Any, Any]], str | None]:
        """A page of tasks and the cursor of the next one.

        With ``updated_since`` the order is oldest change first by (updated_at, id) — the order a
        poller reconciles in, each page continuing exactly where the last ended; otherwise newest first.
        """
        t = tasks
        stmt = select(t)
        for col, value in ((t.c.caller, caller), (t.c.state, state), (t.c.task_type, task_type), (t.c.queue, queue)):
            if value is not None:
                stmt = stmt.where(col == value)
        after = _decode_cursor(cursor)
        if updated_since is not None:
            stmt = stmt.where(t.c.updated_at >= updated_since)
            if after is not None:
                stmt = stmt.where((t.c.updated_at > after[0]) | ((t.c.updated_at == after[0]) & (t.c.id > after[1])))
            stmt = stmt.order_by(t.c.updated_at, t.c.id)
            key = "updated_at"
        else:
            if after is not None:
                stmt = stmt.where((t.c.created_at < after[0]) | ((t.c.created_at == after[0]) & (t.c.id < after[1])))
            stmt = stmt.order_by(t.c.created_at.desc(), t.c.id.desc())
            key = "created_at"
        async with self.engine.connect() as conn:
            rows: Sequence[Mapping[Any, Any]] = (await conn.execute(stmt.limit(limit + 1))).mappings().all()
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (_encode_cursor(rows[-1][key], rows[-1]["id"]) if more else None)

    # ------------------------------------------------------------------ caller actions

    async def cancel(self, task_id: str, *, caller: str | None) -> Mapping[Any, Any]:
        """Cancel: a task not yet running is ``killed`` at once; a running one is told to stop (its worker
        moves it to ``killed`` at its next check, discarding a result that arrives after). Terminal: 409."""
        row = await self.get(task_id, caller=caller)
        if row["state"] in TERMINAL:
            raise HearthError("task_state_conflict", f"The task is already {row['state']}.",
                              details={"state": row["state"]})
        async with write_transaction(self.engine) as conn:
            now = self.clock.now()
            moved = await apply(conn, [Move(task_id, "killed", values={
                "finished_at": now, "lease_until": None, "error_code": "task_cancelled", "cancel_requested": True,
                "error": {"code": "task_cancelled", "message": "The task was cancelled before it ran.",
                          "details": {}}}, detail={"reason": "cancelled"},
                only_from=frozenset({"waiting", "queued", "hold"}))], now=now)
            await after_moves(conn, moved, now=now, rules=self.rules)
            if not moved:  # running (or it started meanwhile): ask its worker
                await conn.execute(update(tasks).where(tasks.c.id == task_id, tasks.c.state == "running")
                                   .values(cancel_requested=True, updated_at=now))
                if conn.dialect.name == "postgresql":
                    from sqlalchemy import text

                    await conn.execute(text("SELECT pg_notify(:c, :id)"), {"c": CANCEL_CHANNEL, "id": task_id})
        self.wakeups.cancelled(task_id)
        return await self.get(task_id, caller=caller)

    async def replay(self, task_id: str, *, caller: str | None, request_id: str | None) -> Mapping[Any, Any]:
        """A new task with the same type, payload and options, linked by ``replay_of``."""
        row = await self.get(task_id, caller=caller)
        sub = Submission(task_type=row["task_type"], payload=row["payload"], caller=row["caller"],
                         priority=row["priority"], queue=row["queue"], callback_url=row["callback_url"],
                         tenant=row["tenant"], end_user=row["end_user"], request_id=request_id, replay_of=row["id"])
        (new, _), = await self.submit([sub])
        return new

    # ------------------------------------------------------------------ operator actions

    async def acknowledge(self, task_id: str, *, operator: str, reason: str) -> Mapping[Any, Any]:
        return await self._letter_action(task_id, action="acknowledge", status="ACKNOWLEDGED", operator=operator,
                                         reason=reason, expect=("OPEN",))

    async def redrive(self, task_id: str, *, operator: str, reason: str) -> Mapping[Any, Any]:
        """Queue a failed task for a new attempt; its dead letter is REDRIVEN until that attempt ends."""
        _require_operator(operator, reason)
        async with write_transaction(self.engine) as conn:
            now = self.clock.now()
            letter = await dead_letters.record_action(conn, task_id, action="redrive", status="REDRIVEN",
                                                      operator=operator, reason=reason, now=now,
                                                      expect=("OPEN", "ACKNOWLEDGED"))
            if letter is None:
                raise await self._no_letter(conn, task_id, "redriven")
            row = (await conn.execute(select(tasks.c.attempt, tasks.c.max_attempts).where(
                tasks.c.id == task_id))).first()
            assert row is not None
            moved = await apply(conn, [Move(task_id, "queued", values={
                "run_after": now, "finished_at": None, "max_attempts": max(row[1], row[0] + 1),
                "cancel_requested": False}, detail={"reason": "redrive", "operator": operator})], now=now)
            if not moved:
                raise HearthError("task_state_conflict", "Only a failed task can be redriven.")
            await task_queue.notify(conn, [moved[0].row["queue"]])
        await count_requeued(self.engine, 1)
        self.wakeups.poke(moved[0].row["queue"])
        return letter

    async def _letter_action(self, task_id: str, *, action: str, status: str, operator: str, reason: str,
                             expect: tuple[str, ...]) -> Mapping[Any, Any]:
        _require_operator(operator, reason)
        async with write_transaction(self.engine) as conn:
            letter = await dead_letters.record_action(conn, task_id, action=action, status=status, operator=operator,
                                                      reason=reason, now=self.clock.now(), expect=expect)
            if letter is None:
                raise await self._no_letter(conn, task_id, "acknowledged")
        return letter

    async def _no_letter(self, conn: AsyncConnection, task_id: str, what: str) -> HearthError:
        letter = await dead_letters.get(conn, task_id)
        if letter is None:
            return HearthError("dead_letter_not_found", f"No dead letter for task `{task_id}`.", param="task_id")
        return HearthError("task_state_conflict", f"A {letter['status']} dead letter cannot be {what}.",
                           details={"status": letter["status"]})

    async def dead_letter(self, task_id: str) -> Mapping[Any, Any]:
        async with self.engine.connect() as conn:
            letter = await dead_letters.get(conn, task_id)
        if letter is None:
            raise HearthError("dead_letter_not_found", f"No dead letter for task `{task_id}`.", param="task_id")
        return letter

    async def dead_letter_page(self, *, status: str | None, severity: str | None, task_type: str | None,
                               cursor: str | None, limit: int) -> tuple[Sequence[Mapping[Any, Any]], str | None]:
        async with self.engine.connect() as conn:
            rows = await dead_letters.listing(conn, status=status, severity_=severity, task_type=task_type,
                                              before=_decode_cursor(cursor), limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (_encode_cursor(rows[-1]["opened_at"], rows[-1]["task_id"]) if more else None)

    async def override(self, task_id: str, *, to: str, operator: str, reason: str) -> Mapping[Any, Any]:
        """An operator's decision on a held (or failed) task: ``queued`` (release), ``skipped``, ``mark_succeeded``."""
        _require_operator(operator, reason)
        async with write_transaction(self.engine) as conn:
            now = self.clock.now()
            values: dict[str, Any] = {"hold_reason": None}
            if to == "queued":
                values.update(run_after=now)
            else:
                values.update(finished_at=now)
            moved = await apply(conn, [Move(task_id, to, values=values,
                                            detail={"operator": operator, "reason": reason})], now=now)
            if not moved:
                row = (await conn.execute(select(tasks.c.state).where(tasks.c.id == task_id))).first()
                if row is None:
                    raise HearthError("task_not_found", f"No task `{task_id}`.", param="task_id")
                raise HearthError("task_state_conflict", f"A {row[0]} task cannot move to {to}.",
                                  details={"state": row[0]})
            await after_moves(conn, moved, now=now, rules=self.rules)
            if to == "queued":
                await task_queue.notify(conn, [moved[0].row["queue"]])
        if to == "queued":
            await count_requeued(self.engine, 1)
        return await self.get(task_id, caller=None)

    async def deliveries(self, *, state: str | None, task_id: str | None, after_id: int | None,
                         limit: int) -> Sequence[Mapping[Any, Any]]:
        async with self.engine.connect() as conn:
            return await callbacks.listing(conn, state=state, task_id=task_id, after_id=after_id, limit=limit)

    async def redeliver(self, task_id: str, *, caller: str | None) -> int:
        await self.get(task_id, caller=caller)
        async with write_transaction(self.engine) as conn:
            return await callbacks.redeliver(conn, task_id, now=self.clock.now())


def _require_operator(operator: str, reason: str) -> None:
    if not operator.strip() or not reason.strip():
        raise HearthError("invalid_request", "An operator action needs a non-empty `operator` and `reason`.",
                          param="operator" if not operator.strip() else "reason")


def _encode_cursor(at: float, task_id: str) -> str:
    return base64.urlsafe_b64encode(f"{at!r}|{task_id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str | None) -> tuple[float, str] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, task_id = raw.partition("|")
        return float(at), task_id
    except (ValueError, UnicodeDecodeError):
        raise HearthError("invalid_request", "`cursor` is not a cursor this API returned.", param="cursor") from None
