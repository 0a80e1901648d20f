"""Schedules: a cron expression in an IANA time zone whose occurrences submit tasks, exactly once, with no leader.

Every Hearth process runs :meth:`ScheduleService.tick` (see :mod:`hearth.workflows.scheduler`). A tick
decides the due occurrences of each schedule in one transaction that inserts one row per occurrence —
keyed by (schedule id, planned instant), so a second process deciding the same occurrence inserts
nothing — and moves the schedule's ``planned_through`` forward only if no other process moved it first
(else the transaction is rolled back). Firing is a second step: an occurrence decided ``fired`` is
submitted as a task whose idempotency key is ``schedule:<id>:<planned ms>``, so whichever process
submits it, and however often after a crash, the task engine holds one task per occurrence.

What an occurrence becomes: ``fired`` (a task was or is being submitted), ``buffered`` (the overlap
policy keeps it until the previous occurrence's task ends), ``skipped`` (overlap), ``missed`` (a
misfire the policy does not run, see :mod:`hearth.workflows.schedule_plan`), ``asking`` (misfire policy
``prompt``: a review item asks a human; approved or modified it fires — as an explicit request, without
overlap rules — rejected or expired it is ``missed``), ``failed`` (the task could not be submitted: an
unknown type, a payload the type refuses — the error code is its reason).

Overlap policies, judged against the latest fired occurrence's task (one not yet submitted counts as
running): ``allow_all`` fires regardless; ``skip`` skips; ``buffer_one`` keeps one buffered occurrence
(a further one is skipped); ``buffer_all`` keeps them all, released one at a time as each run ends;
``cancel_other`` cancels the running task and fires. This module owns ``schedules`` and
``schedule_occurrences``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.observability.logging import get_logger
from hearth.store.db import write_transaction
from hearth.store.tables import schedule_occurrences, schedules, tasks
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.states import TERMINAL
from hearth.workflows.cron import CronSpec, fire_times
from hearth.workflows.reviews import ReviewRequest, ReviewService
from hearth.workflows.schedule_plan import Due, Timing, due, jitter_s, next_occurrence

log = get_logger("hearth.schedules")


class _DecidedElsewhere(Exception):
    """Another process moved the schedule's planning on first: roll back what this one decided."""

_DUE_PER_TICK = 100
_occ = schedule_occurrences.c


@dataclass(frozen=True, slots=True)
class ScheduleDefinition:
    """A schedule as the API (or a test) gives it, already checked: see :func:`hearth.workflows.schedule_spec`."""

    name: str
    caller: str
    cron: str
    time_zone: str
    target: dict[str, Any]  # {task_type, payload, queue, priority}
    start_at: float | None = None
    end_at: float | None = None
    jitter_s: float = 0.0
    misfire_policy: str = "run_once"
    catchup_window_s: float = 3600.0
    overlap_policy: str = "skip"
    paused: bool = False


def timing_of(row: Mapping[Any, Any]) -> Timing:
    return Timing(CronSpec.parse(row["cron"]), ZoneInfo(row["time_zone"]), row["start_at"], row["end_at"],
                  row["misfire_policy"], row["catchup_window_s"])


@dataclass(slots=True)
class ScheduleService:
    engine: AsyncEngine
    tasks: TaskService
    reviews: ReviewService
    clock: Clock = SYSTEM_CLOCK

    # ------------------------------------------------------------------ definitions

    async def create(self, d: ScheduleDefinition) -> Mapping[Any, Any]:
        self.tasks.check_target(d.target["task_type"], d.target.get("payload") or {}, queue=d.target.get("queue"),
                                where="target.")
        now = self.clock.now()
        row: dict[str, Any] = {
            "id": "sch_" + new_id(), "name": d.name, "caller": d.caller, "cron": d.cron, "time_zone": d.time_zone,
            "target": d.target, "start_at": d.start_at, "end_at": d.end_at, "jitter_s": d.jitter_s,
            "misfire_policy": d.misfire_policy, "catchup_window_s": d.catchup_window_s,
            "overlap_policy": d.overlap_policy, "paused": d.paused, "planned_through": now,
            "created_at": now, "updated_at": now}
        row["next_at"] = next_occurrence(timing_of(row), now)
        try:
            async with write_transaction(self.engine) as conn:
                await conn.execute(insert(schedules).values(**row))
        except IntegrityError:
            raise HearthError("schedule_exists", f"Caller `{d.caller}` already has a schedule `{d.name}`.",
                              param="name") from None
        return await self.get(row["id"])

    async def get(self, schedule_id: str) -> Mapping[Any, Any]:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(schedules).where(schedules.c.id == schedule_id))).mappings().first()
        if row is None:
            raise HearthError("schedule_not_found", f"No schedule `{schedule_id}`.", param="schedule_id")
        return row

    async def page(self, *, caller: str | None, limit: int) -> Sequence[Mapping[Any, Any]]:
        stmt = select(schedules).order_by(schedules.c.caller, schedules.c.name).limit(limit)
        if caller is not None:
            stmt = stmt.where(schedules.c.caller == caller)
        async with self.engine.connect() as conn:
            return list((await conn.execute(stmt)).mappings().all())

    async def delete(self, schedule_id: str) -> None:
        await self.get(schedule_id)
        async with write_transaction(self.engine) as conn:
            await conn.execute(delete(schedule_occurrences).where(_occ.schedule_id == schedule_id))
            await conn.execute(delete(schedules).where(schedules.c.id == schedule_id))

    async def set_paused(self, schedule_id: str, paused: bool) -> Mapping[Any, Any]:
        """Pause, or resume: a resumed schedule plans from now on (what fell in the pause never fires)."""
        row = await self.get(schedule_id)
        now = self.clock.now()
        values: dict[str, Any] = {"paused": paused, "updated_at": now}
        if not paused and row["paused"]:
            values |= {"planned_through": now, "next_at": next_occurrence(timing_of(row), now)}
        async with write_transaction(self.engine) as conn:
            await conn.execute(update(schedules).where(schedules.c.id == schedule_id).values(**values))
        return await self.get(schedule_id)

    async def occurrences(self, schedule_id: str, *, limit: int) -> Sequence[Mapping[Any, Any]]:
        await self.get(schedule_id)
        async with self.engine.connect() as conn:
            return list((await conn.execute(select(schedule_occurrences).where(_occ.schedule_id == schedule_id)
                                            .order_by(_occ.planned_at.desc()).limit(limit))).mappings().all())

    # ------------------------------------------------------------------ operator actions

    async def trigger(self, schedule_id: str) -> Mapping[Any, Any]:
        """Fire one occurrence now (overlap policies do not apply to an explicit request)."""
        await self.get(schedule_id)
        planned = round(self.clock.now(), 3)
        async with write_transaction(self.engine) as conn:
            await self._insert(conn, schedule_id, [(planned, "fired", "manual")])
        await self.submit_decided()
        return await self._occurrence(schedule_id, planned)

    async def backfill(self, schedule_id: str, start: float, end: float) -> int:
        """Fire every occurrence planned in (``start``, ``end``] that has none yet (at most 1,000; overlap
        policies do not apply to an explicit request); how many were added."""
        row = await self.get(schedule_id)
        timing = timing_of(row)
        times = fire_times(timing.cron, timing.tz, start, min(end, self.clock.now()), limit=1000)
        async with write_transaction(self.engine) as conn:
            known = set((await conn.execute(select(_occ.planned_at).where(
                _occ.schedule_id == schedule_id, _occ.planned_at.in_(times)))).scalars()) if times else set()
            fresh = [(t, "fired", "backfill") for t in times if t not in known]
            await self._insert(conn, schedule_id, fresh)
        await self.submit_decided()
        return len(fresh)

    # ------------------------------------------------------------------ the scheduler's pass

    async def tick(self) -> int:
        """Decide what is due, release buffered occurrences whose predecessor ended, submit what was
        decided; the number of tasks submitted."""
        now = self.clock.now()
        async with self.engine.connect() as conn:  # one connection for what a pass with nothing to do reads
            due_rows = (await conn.execute(select(schedules).where(
                schedules.c.next_at <= now, schedules.c.paused.is_(False)).order_by(schedules.c.next_at)
                .limit(_DUE_PER_TICK))).mappings().all()
            buffered = (await conn.execute(select(_occ.schedule_id).where(_occ.state == "buffered")
                                           .distinct().limit(_DUE_PER_TICK))).scalars().all()
            asking: Sequence[Mapping[Any, Any]] | None = await self._asking(conn)
            pending: Sequence[Mapping[Any, Any]] | None = await self._pending(conn)
        if due_rows or buffered:  # what this pass decides or releases is read again below
            asking = pending = None
        for row in due_rows:
            await self._decide(row, now)
        for schedule_id in buffered:
            await self._release_buffered(schedule_id)
        if await self._ask_and_settle(asking):  # some now fire
            pending = None
        return await self.submit_decided(pending)

    async def _decide(self, row: Mapping[Any, Any], now: float) -> None:
        timing = timing_of(row)
        decisions, through = due(timing, planned_through=row["planned_through"], now=now)
        try:
            async with write_transaction(self.engine) as conn:
                outcomes = await self._with_overlap(conn, row, decisions)
                await self._insert(conn, row["id"], outcomes)
                moved = await conn.execute(update(schedules).where(
                    schedules.c.id == row["id"], schedules.c.planned_through == row["planned_through"]).values(
                    planned_through=through, next_at=next_occurrence(timing, through), updated_at=now))
                if moved.rowcount != 1:
                    raise _DecidedElsewhere
        except _DecidedElsewhere:  # another process decided this stretch first: nothing of ours is kept
            pass

    async def _with_overlap(self, conn: AsyncConnection, row: Mapping[Any, Any],
                            decisions: list[Due]) -> list[tuple[float, str, str | None]]:
        policy = row["overlap_policy"]
        running = await self._running(conn, row["id"])
        buffered = int((await conn.execute(select(func.count()).select_from(schedule_occurrences).where(
            _occ.schedule_id == row["id"], _occ.state == "buffered"))).scalar_one())
        out: list[tuple[float, str, str | None]] = []
        for d in decisions:
            if d.ask:
                out.append((d.planned_at, "asking", "misfire"))
                continue
            if not d.fire:
                out.append((d.planned_at, "missed", "misfire"))
                continue
            reason = "misfire" if d.late else None
            if running and (policy == "skip" or (policy == "buffer_one" and buffered)):
                out.append((d.planned_at, "skipped", "overlap"))
            elif running and policy in ("buffer_one", "buffer_all"):
                out.append((d.planned_at, "buffered", "overlap"))
                buffered += 1
            else:
                out.append((d.planned_at, "fired", "cancel_other" if running and policy == "cancel_other" else reason))
                running = True
        return out

    async def _running(self, conn: AsyncConnection, schedule_id: str) -> bool:
        """Whether the latest fired occurrence's task has not ended (not yet submitted counts as running)."""
        last = (await conn.execute(select(_occ.task_id).where(_occ.schedule_id == schedule_id, _occ.state == "fired")
                                   .order_by(_occ.planned_at.desc()).limit(1))).first()
        if last is None:
            return False
        if last[0] is None:
            return True
        state = (await conn.execute(select(tasks.c.state).where(tasks.c.id == last[0]))).scalar()
        return state is not None and state not in TERMINAL

    async def _release_buffered(self, schedule_id: str) -> None:
        async with write_transaction(self.engine) as conn:
            if await self._running(conn, schedule_id):
                return
            first = (await conn.execute(select(_occ.planned_at).where(
                _occ.schedule_id == schedule_id, _occ.state == "buffered").order_by(_occ.planned_at).limit(1))).scalar()
            if first is not None:
                await conn.execute(update(schedule_occurrences).where(
                    _occ.schedule_id == schedule_id, _occ.planned_at == first, _occ.state == "buffered").values(
                    state="fired", reason="buffered", decided_at=self.clock.now()))

    async def _insert(self, conn: AsyncConnection, schedule_id: str,
                      outcomes: Sequence[tuple[float, str, str | None]]) -> None:
        """One row per occurrence; one another process inserted first stays as it is."""
        if not outcomes:
            return
        now = self.clock.now()
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(schedule_occurrences).on_conflict_do_nothing()
        await conn.execute(stmt, [{"schedule_id": schedule_id, "planned_at": t, "state": state, "reason": reason,
                                   "task_id": None, "review_id": None, "decided_at": now}
                                  for t, state, reason in outcomes])

    async def _asking(self, conn: AsyncConnection) -> Sequence[Mapping[Any, Any]]:
        return (await conn.execute(select(schedule_occurrences, schedules.c.name, schedules.c.caller,
                                          schedules.c.target, schedules.c.catchup_window_s).join(
            schedules, schedules.c.id == _occ.schedule_id).where(_occ.state == "asking").limit(
            _DUE_PER_TICK))).mappings().all()

    async def _ask_and_settle(self, asking: Sequence[Mapping[Any, Any]] | None = None) -> int:
        """Misfire policy ``prompt``: raise the review item of each ``asking`` occurrence (once: its id is
        fixed by the occurrence), and settle those a human decided or that expired; how many now fire.
        ``asking``: those occurrences, if the caller has just read them."""
        if asking is None:
            async with self.engine.connect() as conn:
                asking = await self._asking(conn)
        fired = 0
        for occ in asking:
            if occ["review_id"] is None:
                await self._ask(occ)
                continue
            review = await self.reviews.get(occ["review_id"])
            outcome = {"approved": ("fired", "approved"), "modified": ("fired", "approved"),
                       "rejected": ("missed", "rejected"), "expired": ("missed", "review_expired")}.get(review["state"])
            if outcome is not None:
                async with write_transaction(self.engine) as conn:
                    settled = await conn.execute(update(schedule_occurrences).where(
                        _occ.schedule_id == occ["schedule_id"], _occ.planned_at == occ["planned_at"],
                        _occ.state == "asking").values(state=outcome[0], reason=outcome[1],
                                                      decided_at=self.clock.now()))
                fired += settled.rowcount if outcome[0] == "fired" else 0
        return fired

    async def _ask(self, occ: Mapping[Any, Any]) -> None:
        planned = occ["planned_at"]
        item_id = "rv_sch_" + hashlib.sha256(f"{occ['schedule_id']}:{planned:.3f}".encode()).hexdigest()[:24]
        when = datetime.fromtimestamp(planned, UTC).isoformat(timespec="seconds")
        await self.reviews.raise_item(ReviewRequest(
            title=f"Run the missed occurrence of schedule `{occ['name']}` planned at {when}?",
            payload={"schedule_id": occ["schedule_id"], "planned_at": planned, "target": occ["target"]},
            timeout_s=max(60.0, occ["catchup_window_s"]), queue="schedules", subject_kind="schedule_occurrence",
            subject_id=f"{occ['schedule_id']}@{round(planned * 1000)}", caller=occ["caller"], item_id=item_id))
        async with write_transaction(self.engine) as conn:
            await conn.execute(update(schedule_occurrences).where(
                _occ.schedule_id == occ["schedule_id"], _occ.planned_at == planned, _occ.review_id.is_(None))
                .values(review_id=item_id))

    async def _pending(self, conn: AsyncConnection) -> Sequence[Mapping[Any, Any]]:
        return (await conn.execute(select(schedule_occurrences, schedules).join(
            schedules, schedules.c.id == _occ.schedule_id).where(
            _occ.state == "fired", _occ.task_id.is_(None)).order_by(_occ.planned_at).limit(
            _DUE_PER_TICK))).mappings().all()

    async def submit_decided(self, pending: Sequence[Mapping[Any, Any]] | None = None) -> int:
        """Submit every fired occurrence that has no task yet (after a crash, whichever process comes next).
        ``pending``: those occurrences, if the caller has just read them."""
        if pending is None:
            async with self.engine.connect() as conn:
                pending = await self._pending(conn)
        submitted = 0
        for occ in pending:
            submitted += await self._submit(occ)
        return submitted

    async def _submit(self, occ: Mapping[Any, Any]) -> int:
        schedule_id, planned = occ["schedule_id"], occ["planned_at"]
        target = occ["target"]
        if occ["reason"] == "cancel_other":
            await self._cancel_previous(schedule_id, planned)
        sub = Submission(task_type=target["task_type"], payload=target.get("payload") or {}, caller=occ["caller"],
                         priority=int(target.get("priority") or 0), queue=target.get("queue"),
                         idempotency_key=f"schedule:{schedule_id}:{round(planned * 1000)}",
                         run_after=planned + jitter_s(schedule_id, planned, occ["jitter_s"]))
        where = and_(_occ.schedule_id == schedule_id, _occ.planned_at == planned, _occ.task_id.is_(None))
        try:
            ((task, _created),) = await self.tasks.submit([sub])
        except HearthError as exc:
            if exc.retryable:  # a full queue, say: the next tick tries again
                log.warning("schedule_submit_deferred", schedule_id=schedule_id, error=exc.code)
                return 0
            async with write_transaction(self.engine) as conn:
                await conn.execute(update(schedule_occurrences).where(where).values(state="failed",
                                                                                   reason=exc.code[:32]))
            log.warning("schedule_submit_failed", schedule_id=schedule_id, error=exc.code)
            return 0
        async with write_transaction(self.engine) as conn:
            await conn.execute(update(schedule_occurrences).where(where).values(task_id=task["id"]))
        return 1

    async def _cancel_previous(self, schedule_id: str, planned: float) -> None:
        async with self.engine.connect() as conn:
            previous = (await conn.execute(select(_occ.task_id).where(
                _occ.schedule_id == schedule_id, _occ.state == "fired", _occ.planned_at < planned,
                _occ.task_id.is_not(None)).order_by(_occ.planned_at.desc()).limit(1))).scalar()
        if previous is None:
            return
        try:
            await self.tasks.cancel(previous, caller=None)
        except HearthError:  # it ended meanwhile: nothing to cancel
            pass

    async def _occurrence(self, schedule_id: str, planned: float) -> Mapping[Any, Any]:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(schedule_occurrences).where(
                _occ.schedule_id == schedule_id, _occ.planned_at == planned))).mappings().first()
        assert row is not None
        return row
