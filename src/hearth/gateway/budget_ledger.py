"""The budget ledger: the database's authoritative record of every reservation and settlement.

Rows are written by a batch writer (no synchronous database write per call) that, unlike the
request-log writer, never drops: if its backlog passes ``max_backlog`` admission refuses new
budgeted calls with 503 rather than spend money it cannot record. At start the state backend's
hot counters are rebuilt from the ledger (only where the backend has no value, so live Redis
counters shared with running processes are never overwritten). This module owns ``budget_ledger``.

Row kinds: ``reserve`` (amount = reserved), ``settle`` (amount = charged, ``refund``, ``overrun``)
and ``call`` — a reservation and its settlement in one row, written when the call settled while
its reservation was still waiting in the writer's queue (the usual case for short calls; it halves
the rows written). A ``call`` row reserved ``amount + refund`` and charged ``amount``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.gateway.budget import period_key, utc_now
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Registry
from hearth.state.base import StateBackend
from hearth.store.db import stop_writer_task
from hearth.store.tables import budget_ledger

log = get_logger("hearth.budget_ledger")


class BudgetLedger:
    def __init__(self, engine: AsyncEngine, flush_s: float = 0.2, batch: int = 1000,
                 max_backlog: int = 100_000) -> None:
        self._engine = engine
        self._rows: deque[dict[str, Any]] = deque()
        self._queued_reserves: dict[tuple[str, str], dict[str, Any]] = {}  # (call, counter) -> row not yet written
        self._flush_s = flush_s
        self._batch = batch
        self.max_backlog = max_backlog
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self.written = 0
        self.failed_batches = 0

    @property
    def backlog(self) -> int:
        return len(self._rows)

    def reserved(self, call_id: str, budget: str, counter_key: str, amount: int) -> None:
        row = {"call_id": call_id, "budget": budget, "counter_key": counter_key, "kind": "reserve",
               "amount": amount, "refund": 0, "overrun": 0, "created_at": datetime.now(UTC)}
        self._rows.append(row)
        self._queued_reserves[(call_id, counter_key)] = row

    def settled(self, call_id: str, budget: str, counter_key: str, charged: int, refund: int, overrun: int) -> None:
        row = self._queued_reserves.pop((call_id, counter_key), None)
        if row is not None:  # still queued: turn it into one ``call`` row
            row.update(kind="call", amount=charged, refund=refund, overrun=overrun)
            return
        self._rows.append({"call_id": call_id, "budget": budget, "counter_key": counter_key, "kind": "settle",
                           "amount": charged, "refund": refund, "overrun": overrun, "created_at": datetime.now(UTC)})

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="budget-ledger-writer")

    async def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._flush_s)
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            while self._rows:
                n = min(len(self._rows), self._batch)
                rows = [self._rows[i] for i in range(n)]
                for row in rows:  # from here on these rows are being written: a settlement gets its own row
                    if row["kind"] == "reserve":
                        self._queued_reserves.pop((row["call_id"], row["counter_key"]), None)
                try:
                    async with self._engine.begin() as conn:
                        await conn.execute(budget_ledger.insert(), rows)
                except Exception as exc:  # keep the rows and try again later: money records are never dropped
                    self.failed_batches += 1
                    log.error("budget_ledger_write_failed", rows=n, error=type(exc).__name__)
                    return
                for _ in range(n):
                    self._rows.popleft()
                self.written += n

    async def stop(self) -> None:
        if self._task is not None:
            self._stop.set()
            await stop_writer_task(self._task)
            self._task = None
        await self.flush()

    async def balances(self, counter_keys: list[str] | None = None) -> dict[str, dict[str, int]]:
        """Per counter: reserved (open reservations), spent (settled charges) and their sum (``used``)."""
        c = budget_ledger.c
        settled = c.kind.in_(("settle", "call"))
        stmt = select(
            c.counter_key,
            func.sum(case((c.kind == "reserve", c.amount), (c.kind == "call", c.amount + c.refund),
                          else_=0)).label("reserved_all"),
            func.sum(case((settled, c.amount), else_=0)).label("spent"),
            func.sum(case((settled, c.refund), else_=0)).label("refunded"),
        ).group_by(c.counter_key)
        if counter_keys is not None:
            stmt = stmt.where(budget_ledger.c.counter_key.in_(counter_keys))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        out: dict[str, dict[str, int]] = {}
        for r in rows:
            reserved_all, spent, refunded = int(r["reserved_all"] or 0), int(r["spent"] or 0), int(r["refunded"] or 0)
            used = reserved_all - refunded
            out[r["counter_key"]] = {"used": used, "spent": spent, "reserved": used - spent}
        return out

    async def rebuild(self, state: StateBackend, registry: Registry) -> int:
        """Seed the state backend's budget counters from the ledger where it has none; returns how many."""
        names = {b.name: b for b in registry.budgets}
        seeded = 0
        for key, bal in (await self.balances()).items():
            budget = names.get(key.split("|", 1)[0])
            if budget is None:
                continue
            suffix, ttl = period_key(budget.period, utc_now())
            if not key.endswith("|" + suffix):
                continue  # a past period: nothing will be charged there again
            if await state.seed_counter(key, bal["used"], ttl):
                seeded += 1
        return seeded
