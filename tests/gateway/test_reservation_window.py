"""The reservation window: why a rebuild of the state backend never misses a reservation.

Every admission that a lost backend could have taken ran before the loss, so a reservation committed
within the *reservation window* (``HEARTH_RESERVATION_WINDOW_S``) of sending its admission is in the
database at most one window after the loss: a rebuild that reads the ledger one window after it
noticed the loss counts it, and its call proceeds with no per-call check against the backend. A
reservation committed later is checked against the backend's epoch.
On SQLite and PostgreSQL, with the real Redis backend.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
import redis
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.gateway.budget import counter_key, period_key
from hearth.gateway.budget_ledger import BudgetLedger, Charge, ReservationNotDurable, ReservationSuperseded
from hearth.gateway.state_recovery import StateRecovery
from hearth.registry.snapshot import Budget, Registry
from hearth.state.memory import MemoryState
from hearth.state.redis import RedisState
from hearth.state.redis_scripts import Keys
from hearth.store.db import create_engine, migrate
from hearth.store.tables import budget_ledger
from tests.support import REDIS_URL

WINDOW_S = 0.4


def daily_key() -> str:
    suffix, _ = period_key("day", datetime.now(UTC))
    return counter_key("daily", "app", "app", suffix)


async def reserve_rows(engine: AsyncEngine) -> list[str]:
    c = budget_ledger.c
    async with engine.connect() as conn:
        result = await conn.execute(select(c.call_id).where(c.kind == "reserve"))
        return [row[0] for row in result]


async def test_a_late_commit_proceeds_when_no_rebuild_read_the_ledger_since(
        engine: AsyncEngine, redis_prefix: str) -> None:
    state, recovery, ledger = await _wired(engine, redis_prefix)
    try:
        epoch = state.epoch
        share = await ledger.reserve("late-call", (Charge("daily", daily_key(), 700),),
                                     deadline=time.monotonic() - 1, epoch=epoch)  # "after its window": checked
        assert ledger.reservations_late == 1 and ledger.superseded == 0
        assert await reserve_rows(engine) == [share.group.id]
    finally:
        await _unwire(state, recovery, ledger)


async def test_a_late_commit_after_a_rebuild_that_missed_it_is_refused_and_refunded(
        engine: AsyncEngine, redis_prefix: str) -> None:
    state, recovery, ledger = await _wired(engine, redis_prefix)
    try:
        before = state.epoch
        assert before is not None
        with redis.Redis.from_url(REDIS_URL) as r:
            r.delete(Keys(redis_prefix).epoch)  # lost, and rebuilt...
        await recovery.ensure()
        assert state.epoch is not None and state.epoch != before
        with pytest.raises(ReservationSuperseded):  # ...before this reservation (admitted under the
            await ledger.reserve("missed", (Charge("daily", daily_key(), 700),),  # old epoch) landed
                                 deadline=time.monotonic() - 1, epoch=before)
        await ledger.flush()
        c = budget_ledger.c
        async with engine.connect() as conn:
            result = await conn.execute(select(c.kind, c.amount, c.refund, c.call_id))
            found = sorted(tuple(r) for r in result)
            assert [r[:3] for r in found] == [("reserve", 700, 0), ("settle", 0, 700)]
            assert found[0][3] == found[1][3]  # the same reservation, given back
        assert await state.counters((daily_key(),)) == (0,)
    finally:
        await _unwire(state, recovery, ledger)


async def _wired(engine: AsyncEngine, prefix: str) -> tuple[RedisState, StateRecovery, BudgetLedger]:
    state = RedisState(REDIS_URL, prefix)
    registry = Registry(budgets=(Budget("daily", "app", "caller", "app", "day", "money", 10_000),))
    recovery = StateRecovery(state, engine, lambda: registry, reservation_ttl_s=30, open_within_s=300,
                             reservation_window_s=0.05)
    await recovery.ensure()
    return state, recovery, BudgetLedger(engine, state)


async def _unwire(state: RedisState, recovery: StateRecovery, ledger: BudgetLedger) -> None:
    await ledger.stop()
    await recovery.stop()
    await state.close()


async def test_a_commit_not_seen_within_the_commit_timeout_is_not_durable(postgres_url: str) -> None:
    engine = create_engine(postgres_url)  # a table lock held by another connection: a slow database
    await migrate(engine)
    ledger = BudgetLedger(engine, MemoryState(), commit_timeout_s=0.2)
    try:
        async with engine.connect() as other:
            await other.execute(text("LOCK TABLE budget_ledger IN ACCESS EXCLUSIVE MODE"))
            with pytest.raises(ReservationNotDurable) as refused:
                await ledger.reserve("stuck", (Charge("daily", daily_key(), 700),), deadline=time.monotonic() + 5)
            assert refused.value.uncertain  # it may still land: the safe side is to leave it spent
            await other.rollback()
        await ledger.stop()
        assert len(await reserve_rows(engine)) == 1  # it did land once the lock went
    finally:
        await engine.dispose()


async def test_every_reservation_behind_a_stuck_commit_times_out_on_its_own(postgres_url: str) -> None:
    """The first reservation's commit hangs on a lock; the second waits for the next commit, which cannot start:
    each is refused (not durable) once its own timeout has passed, neither before."""
    engine = create_engine(postgres_url)
    await migrate(engine)
    ledger = BudgetLedger(engine, MemoryState(), commit_timeout_s=0.3)
    try:
        async with engine.connect() as other:
            await other.execute(text("LOCK TABLE budget_ledger IN ACCESS EXCLUSIVE MODE"))

            async def reserve(call_id: str, after_s: float) -> float:
                await asyncio.sleep(after_s)
                began = time.monotonic()
                with pytest.raises(ReservationNotDurable) as refused:
                    await ledger.reserve(call_id, (Charge("daily", daily_key(), 7),), deadline=began + 5)
                assert refused.value.uncertain
                return time.monotonic() - began

            waited = await asyncio.gather(reserve("first", 0), reserve("second", 0.1))
            assert all(0.3 <= w < 3 for w in waited), waited
            await other.rollback()
        await ledger.stop()
    finally:
        await engine.dispose()


async def test_a_rebuild_counts_a_reservation_committed_just_after_the_loss(
        engine: AsyncEngine, redis_prefix: str) -> None:
    state = RedisState(REDIS_URL, redis_prefix)
    registry = Registry(budgets=(Budget("daily", "app", "caller", "app", "day", "money", 10_000),))
    recovery = StateRecovery(state, engine, lambda: registry, reservation_ttl_s=30, open_within_s=300,
                             reservation_window_s=WINDOW_S)
    ledger = BudgetLedger(engine, state)
    try:
        await recovery.ensure()  # the first epoch of this deployment (nothing lost, no wait)
        first = state.epoch
        assert first is not None
        key = daily_key()
        with redis.Redis.from_url(REDIS_URL) as r:
            r.delete(Keys(redis_prefix).epoch)  # the backend lost its data
        # A call admitted just before the loss commits its reservation just after it, while the
        # first process to notice the loss is already rebuilding.
        started = time.monotonic()
        recovery.trigger()
        await asyncio.sleep(WINDOW_S / 4)
        await ledger.reserve("admitted-before-the-loss", (Charge("daily", key, 700),),
                             deadline=started + WINDOW_S, epoch=first)
        await recovery.ensure()
        assert state.epoch is not None and state.epoch != first
        assert time.monotonic() - started >= WINDOW_S  # it waited for the window before reading
        assert await state.counters((key,)) == (700,)
    finally:
        await ledger.stop()
        await recovery.stop()
        await state.close()


async def test_the_first_rebuild_of_a_deployment_does_not_wait(engine: AsyncEngine, redis_prefix: str) -> None:
    state = RedisState(REDIS_URL, redis_prefix)
    recovery = StateRecovery(state, engine, Registry, reservation_ttl_s=30, open_within_s=300,
                             reservation_window_s=30.0)
    try:
        started = time.monotonic()
        await asyncio.wait_for(recovery.ensure(), 5)  # nothing can have been reserved under an epoch yet
        assert state.epoch is not None
        assert time.monotonic() - started < 5
    finally:
        await recovery.stop()
        await state.close()
