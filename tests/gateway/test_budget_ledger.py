"""The budget ledger: reservations durable before a call proceeds (group commit), settlements that
add up, overruns charged in full, the expiry sweep, and the rebuild snapshot — on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.gateway.budget_balances import Balance, balances, rebuild_snapshot, sweep_expired
from hearth.gateway.budget_ledger import BudgetLedger, Charge, ReservationNotDurable
from hearth.state.memory import MemoryState
from hearth.store.db import create_engine
from hearth.store.tables import budget_ledger, dead_rows

KEY = "daily|app|app|d20261129"


def soon() -> float:
    """A reservation window no test here comes near (see test_reservation_window.py for the window)."""
    return time.monotonic() + 30


async def rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        result = await conn.execute(select(budget_ledger).order_by(budget_ledger.c.id))
        return [dict(r) for r in result.mappings().all()]


@pytest.fixture
async def ledger(engine: AsyncEngine) -> AsyncIterator[BudgetLedger]:
    book = BudgetLedger(engine, MemoryState())
    yield book
    await book.stop()  # gives back the connection it keeps for reservations


async def test_a_reservation_is_in_the_database_when_reserve_returns(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    share = await ledger.reserve("c1", (Charge("daily", KEY, 1000),), deadline=soon())
    assert [(r["kind"], r["amount"], r["calls"], r["call_id"]) for r in await rows(engine)] == [
        ("reserve", 1000, 1, share.group.id)]
    assert (await balances(engine))[KEY] == Balance(used=1000, spent=0, reserved=1000)


async def test_a_reservation_made_a_loop_pass_after_another_joins_its_commit(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    """The group stays open for GROUP_PASSES passes of the event loop: a call that reaches its reservation one
    pass after another (as the next request of a busy loop does) shares its transaction instead of waiting
    for a commit of its own."""
    first = asyncio.create_task(ledger.reserve("c1", (Charge("daily", KEY, 10),), deadline=soon()))
    await asyncio.sleep(0)  # c1 has reserved and opened a group; one pass later c2 reserves
    assert ledger.reservation_commits == 0
    second = asyncio.create_task(ledger.reserve("c2", (Charge("daily", KEY, 10),), deadline=soon()))
    await asyncio.gather(first, second)
    assert (ledger.reservation_commits, ledger.reservations_committed) == (1, 2)
    assert [(r["kind"], r["calls"], r["amount"]) for r in await rows(engine)] == [("reserve", 2, 20)]


async def test_concurrent_reservations_share_transactions_and_rows(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    other = "tokens|app|u1|m202611"
    shares = await asyncio.gather(*[
        ledger.reserve(f"c{i}", (Charge("daily", KEY, 10), Charge("monthly", other, 1)), deadline=soon())
        for i in range(200)])
    assert ledger.reservations_committed == 200
    assert ledger.reservation_commits < 50  # group commit: far fewer transactions than calls
    written = await rows(engine)
    assert len(written) == 2 * ledger.reservation_commits  # one row per counter per group, not per call
    assert sum(r["calls"] for r in written if r["counter_key"] == KEY) == 200
    assert {r["call_id"] for r in written} == {s.group.id for s in shares}
    assert (await balances(engine))[KEY].used == 2000
    assert (await balances(engine))[other].used == 200


async def test_a_reservation_the_database_cannot_take_is_refused_not_assumed(tmp_path: Any) -> None:
    broken = create_engine(f"sqlite+aiosqlite:///{tmp_path}/missing-dir/none/x.db")
    ledger = BudgetLedger(broken, MemoryState())
    with pytest.raises(ReservationNotDurable) as caught:
        await ledger.reserve("c1", (Charge("daily", KEY, 1000),), deadline=soon())
    assert caught.value.uncertain is False  # nothing was committed: the caller may refund
    assert ledger.database_ok is False
    await ledger.stop()
    await broken.dispose()


async def test_a_group_is_settled_once_every_call_in_it_has_ended(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    a, b, c = await asyncio.gather(*[ledger.reserve(f"c{i}", (Charge("daily", KEY, 1000),), deadline=soon())
                                     for i in range(3)])
    assert a.group is b.group is c.group  # one commit, one group
    a.settle((300,), epoch="")
    b.spent()  # e.g. its settlement could not reach the state backend: the reservation stays spent
    await ledger.flush()
    assert [r["kind"] for r in await rows(engine)] == ["reserve"]  # c is still running
    assert (await balances(engine))[KEY] == Balance(used=3000, spent=0, reserved=3000)
    c.settle((1200,), epoch="")  # an overrun: charged in full
    c.settle((0,), epoch="")  # a share ends once; a second end changes nothing
    await ledger.flush()
    settle = [r for r in await rows(engine) if r["kind"] == "settle"]
    assert [(r["amount"], r["refund"], r["overrun"], r["calls"]) for r in settle] == [(2500, 700, 200, 3)]
    assert (await balances(engine))[KEY] == Balance(used=2500, spent=2500, reserved=0)


async def test_an_overrun_is_charged_in_full(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    share = await ledger.reserve("c1", (Charge("daily", KEY, 1000),), deadline=soon())
    share.settle((1300,), epoch="")
    await ledger.flush()
    assert (await balances(engine))[KEY] == Balance(used=1300, spent=1300, reserved=0)


async def test_mixed_rows_add_up_per_counter(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    other = "tokens|app|u1|m202611"
    a = await ledger.reserve("a", (Charge("daily", KEY, 100), Charge("monthly", other, 50)), deadline=soon())
    await ledger.reserve("b", (Charge("daily", KEY, 200),), deadline=soon())  # open: its process died
    a.settle((60, 50), epoch="")
    await ledger.flush()
    found = await balances(engine)
    assert found[KEY] == Balance(used=260, spent=60, reserved=200)
    assert found[other] == Balance(used=50, spent=50, reserved=0)


async def test_the_sweeper_closes_dead_reservations_as_spent_once(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    dead = await ledger.reserve("dead", (Charge("daily", KEY, 200),), deadline=soon())
    await ledger.reserve("live", (Charge("daily", KEY, 100),), deadline=soon())
    async with engine.begin() as conn:  # the dead call's reservation is old
        await conn.execute(update(budget_ledger).where(budget_ledger.c.call_id == dead.group.id)
                           .values(created_at=datetime.now(UTC) - timedelta(hours=1)))
    assert await sweep_expired(engine, older_than_s=600) == 1
    assert await sweep_expired(engine, older_than_s=600) == 0  # idempotent, also across processes
    found = (await balances(engine))[KEY]
    assert found == Balance(used=300, spent=200, reserved=100)


async def test_the_rebuild_snapshot_lists_open_reservations_and_the_mark(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    still_open = await ledger.reserve("open", (Charge("daily", KEY, 200),), deadline=soon())
    done = await ledger.reserve("done", (Charge("daily", KEY, 100),), deadline=soon())
    done.settle((40,), epoch="")
    await ledger.flush()
    snap = await rebuild_snapshot(engine, open_within_s=600)
    assert snap.open_calls == (still_open.group.id,)
    assert snap.balances[KEY].used == 240
    assert snap.mark == max(r["id"] for r in await rows(engine))


async def test_the_ledger_keeps_writing_after_a_row_the_database_refuses(
        engine: AsyncEngine, ledger: BudgetLedger) -> None:
    bad = await ledger.reserve("bad", (Charge("daily", KEY, 1),), deadline=soon())
    good = await ledger.reserve("good", (Charge("daily", KEY, 100),), deadline=soon())
    bad.settle((2**70,), epoch="")  # beyond any BIGINT
    good.settle((40,), epoch="")
    await ledger.flush()
    assert ledger.dead == 1 and ledger.stats()["pending"] == 0
    assert (await balances(engine))[KEY] == Balance(used=41, spent=40, reserved=1)  # bad stays reserved
    later = await ledger.reserve("later", (Charge("daily", KEY, 0),), deadline=soon())
    later.settle((5,), epoch="")  # and it goes on writing
    await ledger.flush()
    assert (await balances(engine))[KEY].used == 46
    async with engine.connect() as conn:
        dead = (await conn.execute(select(dead_rows))).mappings().all()
    assert [(d["writer"], d["row_key"]) for d in dead] == [("budget_ledger", bad.group.id)]
