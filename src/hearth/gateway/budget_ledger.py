"""The budget ledger writer: the database's authoritative record of every reservation and settlement.

**Reservations are durable before the model is called.** :meth:`BudgetLedger.reserve` returns only
once the call's ``reserve`` rows are committed. Concurrent reservations share one transaction (group
commit: a commit starts as soon as one is waiting, and everything that arrives while it runs goes
into the next one), so under load the cost is a short wait, not a transaction per call.

**The reservation window** makes rebuilding the state backend's counters from the ledger exact
without asking the backend about every call. An admission a lost backend took ran before the loss;
:class:`~hearth.gateway.state_recovery.StateRecovery` reads the ledger one window
(``HEARTH_RESERVATION_WINDOW_S``) after it noticed the loss. So a reservation committed within the
window of its admission's send (the ``deadline``; nearly all of them) is certainly counted by any
rebuild, and its call proceeds at once. One committed later (a slow database, an overloaded process)
is checked against the backend's epoch: unchanged — no rebuild has read the ledger yet, and any later
one sees the row; changed — the row counts only if its id is at most the new epoch's ``mark``, else
the call is refused (:class:`ReservationSuperseded`) and the reservation refunded in the ledger (the
rebuilt counters never held it). A commit not seen at all within ``commit_timeout_s`` may still land,
so it stays spent (the sweeper closes it as spent, as the counters hold it).

**Settlements are asynchronous** (a batch every ``flush_s``): a settlement that is lost (the process
died) leaves its reservation spent, the safe side; the sweeper (:mod:`hearth.gateway.budget_balances`)
closes such reservations as spent after the lease TTL. A row the database refuses goes to
``dead_rows`` (:func:`~hearth.store.batch_insert.insert_isolating`); the writer never stops for one row.
A settlement remembers the state-backend epoch it was applied under: if the backend lost its data and
the rebuild read the ledger before the settlement was committed (its id is above the epoch's
``mark``), its refund is re-applied to the rebuilt counters. This module owns writes to ``budget_ledger``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.observability.logging import get_logger
from hearth.state.base import Epoch, StateBackend, StateUnavailable
from hearth.store.batch_insert import insert_isolating
from hearth.store.db import stop_writer_task, write_lane
from hearth.store.rows_insert import insert_rows
from hearth.store.tables import budget_ledger

log = get_logger("hearth.budget_ledger")


class ReservationSuperseded(Exception):
    """Committed, but after a rebuild of the state backend that did not count it: the call must not
    proceed (it has been refunded in the ledger; the rebuilt counters never held it)."""


class ReservationNotDurable(Exception):
    """The reservation could not be committed. ``uncertain``: it may have been (the commit itself
    failed or timed out), so the caller must leave it spent rather than refund it."""

    def __init__(self, uncertain: bool, reason: str) -> None:
        self.uncertain = uncertain
        super().__init__(reason)


@dataclass(slots=True, frozen=True)
class Charge:
    budget: str
    counter_key: str
    amount: int


@dataclass(slots=True)
class _Waiting:
    call_id: str
    charges: tuple[Charge, ...]
    done: asyncio.Future[float]  # the monotonic time the commit was seen to succeed


class BudgetLedger:
    def __init__(self, engine: AsyncEngine, state: StateBackend, *, flush_s: float = 0.2, batch: int = 1000,
                 max_backlog: int = 100_000, commit_timeout_s: float = 5.0) -> None:
        self._engine = engine
        self._state = state
        self._rows: deque[tuple[dict[str, Any], str]] = deque()  # settlement rows and their epoch
        self._waiting: list[_Waiting] = []
        self._committing = False
        self._commit_task: asyncio.Task[None] | None = None
        self._epoch_read: tuple[float, asyncio.Task[Epoch | None]] | None = None  # (started at, read)
        self._conn: AsyncConnection | None = None
        self._flush_s = flush_s
        self._batch = batch
        self.max_backlog = max_backlog
        self.commit_timeout_s = commit_timeout_s
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self.written = 0
        self.dead = 0
        self.failed_batches = 0
        self.reservations_committed = 0
        self.reservation_commits = 0  # transactions: committed / commits = the group-commit factor
        self.reservations_failed = 0
        self.reservations_late = 0  # committed after their window: checked against the backend's epoch
        self.superseded = 0  # of those, committed after a rebuild that did not count them: refused
        self.last_error: str | None = None
        self.database_ok = True  # False while reservations cannot be committed

    @property
    def backlog(self) -> int:
        return len(self._rows) + len(self._waiting)

    # ---- reservations: durable before the call proceeds ---------------------------------------------
    async def reserve(self, call_id: str, charges: tuple[Charge, ...], *, deadline: float,
                      epoch: Epoch | None = None) -> None:
        """Commit the call's reservation rows (group commit); return once the call may proceed.

        ``deadline`` (``time.monotonic()``) is the admission's send time plus the reservation window;
        ``epoch`` the state-backend epoch the admission ran under. Raises :class:`ReservationNotDurable`
        if the commit failed or was not seen within :attr:`commit_timeout_s`, and
        :class:`ReservationSuperseded` if it landed after a rebuild that did not count it."""
        loop = asyncio.get_running_loop()
        waiting = _Waiting(call_id, charges, loop.create_future())
        waiting.done.add_done_callback(_retrieve)  # a caller that timed out no longer awaits it
        self._waiting.append(waiting)
        if not self._committing:
            self._committing = True
            self._commit_task = loop.create_task(self._commit_waiting(), name="budget-reservation-commit")
        give_up = time.monotonic() + self.commit_timeout_s  # bounds the commit and its check together
        # One timer on the call's own future (not wait_for + shield: two more futures per budgeted call).
        # A caller cancelled here cancels only its future; the group commits the row all the same.
        timer = loop.call_later(self.commit_timeout_s, _settle_future, waiting.done, TimeoutError())
        try:
            committed_at = await waiting.done
        except TimeoutError as exc:
            self.reservations_failed += 1
            raise ReservationNotDurable(True, "the database did not commit the reservation in time") from exc
        finally:
            timer.cancel()
        if committed_at <= deadline or not self._state.shared or epoch is None:
            return  # any rebuild reads the ledger after it (or this backend dies with the process)
        self.reservations_late += 1
        try:
            async with asyncio.timeout(max(0.0, give_up - time.monotonic())):
                counted = await self._counted_after(call_id, epoch, committed_at)
        except TimeoutError as exc:
            raise ReservationNotDurable(True, "the reservation could not be checked in time") from exc
        if counted:
            return
        self.superseded += 1
        for c in charges:  # the rebuilt counters never held it: the ledger gives it back too
            self.settled(call_id, c.budget, c.counter_key, 0, refund=c.amount, overrun=0)
        raise ReservationSuperseded(call_id)

    async def _counted_after(self, call_id: str, admitted_under: Epoch, committed_at: float) -> bool:
        """Whether the backend's current counters hold a reservation committed after its window."""
        try:
            current = await self._epoch_read_after(committed_at)
        except StateUnavailable as exc:  # not known to be counted: refuse, leaving it spent
            raise ReservationNotDurable(True, "the state backend did not answer") from exc
        if current == admitted_under:
            return True  # no loss before this read, so no rebuild has read the ledger yet: every later one sees the row
        if current is None:
            raise ReservationNotDurable(True, "the state backend lost its data and was not rebuilt in time")
        return await self._reserve_id(call_id) <= current.mark

    def _epoch_read_after(self, since: float) -> asyncio.Future[Epoch | None]:
        """The backend's epoch (waiting briefly for a rebuild if it has none), read after ``since``.

        Late reservations arrive in bursts (an overloaded process makes many late at once): they share
        one read that started after their commit, instead of each polling the backend."""
        read = self._epoch_read
        if read is None or read[0] < since or read[1].done():
            task = asyncio.get_running_loop().create_task(self._settled_epoch(), name="reservation-epoch-read")
            task.add_done_callback(_retrieve)
            read = self._epoch_read = (time.monotonic(), task)
        return asyncio.shield(read[1])

    async def _settled_epoch(self) -> Epoch | None:
        return await self._wait_for_epoch(await self._state.read_epoch())

    async def _wait_for_epoch(self, current: Epoch | None, timeout_s: float = 3.0) -> Epoch | None:
        """The backend lost its data: wait (briefly) for some process to rebuild it."""
        give_up = time.monotonic() + timeout_s
        while current is None and time.monotonic() < give_up:
            await asyncio.sleep(0.05)
            with contextlib.suppress(StateUnavailable):
                current = await self._state.read_epoch()
        return current

    async def _reserve_id(self, call_id: str) -> int:
        c = budget_ledger.c
        async with self._engine.connect() as conn:
            row_id = await conn.scalar(select(c.id).where(c.kind == "reserve", c.call_id == call_id).limit(1))
        return int(row_id) if row_id is not None else 0

    async def _commit_waiting(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting[:self._batch], self._waiting[self._batch:]
                await self._commit_group(group)
        finally:
            self._committing = False

    async def _commit_group(self, group: list[_Waiting]) -> None:
        now = datetime.now(UTC)
        rows = [{"call_id": w.call_id, "budget": c.budget, "counter_key": c.counter_key, "kind": "reserve",
                 "amount": c.amount, "refund": 0, "overrun": 0, "created_at": now} for w in group for c in w.charges]
        committing = False
        for attempt in (1, 2):
            reused = self._conn is not None and not self._conn.closed
            try:
                # One connection kept for reservations: no pool checkout and pre-ping per commit (a
                # round trip each, a measurable share of a budgeted call's latency at concurrency 1).
                if self._conn is None or self._conn.closed:
                    self._conn = await self._engine.connect()
                conn = self._conn
                async with write_lane(self._engine):  # never queued inside SQLite (see hearth.store.db)
                    trans = await conn.begin()
                    await insert_rows(conn, budget_ledger, rows)
                    committing = True
                    await trans.commit()
                break
            except Exception as exc:
                await self._drop_connection()
                if attempt == 1 and reused and not committing:
                    continue  # the kept connection went stale (a database restart): once more, afresh
                self.database_ok = False
                self.last_error = type(exc).__name__
                self.reservations_failed += len(group)
                log.error("budget_reservation_commit_failed", calls=len(group), error=type(exc).__name__,
                          uncertain=committing)
                for w in group:
                    _settle_future(w.done, ReservationNotDurable(committing, "the database refused the reservation"))
                return
        committed_at = time.monotonic()
        self.database_ok = True
        self.reservation_commits += 1
        self.reservations_committed += len(group)
        for w in group:
            _settle_future(w.done, committed_at)

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()
            with contextlib.suppress(Exception):
                await conn.close()

    # ---- settlements: asynchronous ---------------------------------------------------------------------
    def settled(self, call_id: str, budget: str, counter_key: str, charged: int, *, refund: int, overrun: int,
                epoch: str = "") -> None:
        """Record a settlement the state backend applied (under ``epoch``): ``charged`` is the real
        cost — more than reserved when ``overrun`` > 0, never capped."""
        self._rows.append(({"call_id": call_id, "budget": budget, "counter_key": counter_key, "kind": "settle",
                            "amount": charged, "refund": refund, "overrun": overrun,
                            "created_at": datetime.now(UTC)}, epoch))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="budget-ledger-writer")

    async def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._flush_s)
            try:
                await self.flush()
            except Exception as exc:  # the writer never stops; the rows stay queued
                self.last_error = type(exc).__name__
                log.error("budget_ledger_flush_failed", error=type(exc).__name__)

    async def flush(self) -> None:
        async with self._lock:
            while self._rows:
                n = min(len(self._rows), self._batch)
                batch = [self._rows[i] for i in range(n)]
                outcome = await insert_isolating(self._engine, budget_ledger, [row for row, _ in batch],
                                                 writer="budget_ledger", row_key="call_id")
                retry = {id(row) for row in outcome.retry}
                for _ in range(n):
                    self._rows.popleft()
                if retry:  # the database is unavailable: keep those rows (money records are never dropped)
                    self.failed_batches += 1
                    self.last_error = outcome.error
                    self._rows.extendleft(reversed([pair for pair in batch if id(pair[0]) in retry]))
                    log.error("budget_ledger_write_failed", rows=len(retry), error=outcome.error)
                    return
                self.written += outcome.written
                self.dead += outcome.dead + outcome.lost
                await self._reapply_after_rebuild([pair for pair in batch if id(pair[0]) not in retry])

    async def _reapply_after_rebuild(self, batch: list[tuple[dict[str, Any], str]]) -> None:
        """Settlements applied to state the backend has since lost, and committed after the rebuild
        read the ledger: the rebuilt counters still hold their whole reservation — give it back."""
        if all(not epoch for _, epoch in batch):
            return
        try:
            current = await self._state.read_epoch()
        except StateUnavailable:
            return
        if current is None:
            return
        now_epoch = current.encode()
        stale = [row for row, epoch in batch if epoch and epoch != now_epoch]
        if not stale:
            return
        c = budget_ledger.c
        async with self._engine.connect() as conn:
            result = await conn.execute(select(c.call_id, c.counter_key, c.id).where(
                c.kind == "settle", c.call_id.in_([r["call_id"] for r in stale])))
            ids = {(row[0], row[1]): int(row[2]) for row in result}
        deltas: dict[str, int] = {}
        for row in stale:
            if ids.get((row["call_id"], row["counter_key"]), 0) > current.mark:
                deltas[row["counter_key"]] = deltas.get(row["counter_key"], 0) + row["overrun"] - row["refund"]
        if deltas:
            with contextlib.suppress(StateUnavailable):
                await self._state.adjust_counters(deltas)
            log.warning("budget_settlements_reapplied", counters=len(deltas))

    async def stop(self) -> None:
        if self._commit_task is not None:  # reservations in flight are committed (or fail) first
            with contextlib.suppress(Exception):
                await self._commit_task
        await self._drop_connection()
        if self._task is not None:
            self._stop.set()
            await stop_writer_task(self._task)
            self._task = None
        await self.flush()

    def stats(self) -> dict[str, Any]:
        return {"written": self.written, "pending": len(self._rows), "dead": self.dead,
                "failed_batches": self.failed_batches, "reservations_committed": self.reservations_committed,
                "reservation_commits": self.reservation_commits, "reservations_failed": self.reservations_failed,
                "reservations_late": self.reservations_late,
                "reservations_superseded": self.superseded, "database_ok": self.database_ok,
                "last_error": self.last_error}


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _settle_future(fut: asyncio.Future[float], outcome: float | BaseException) -> None:
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
