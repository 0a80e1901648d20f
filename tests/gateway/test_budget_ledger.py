"""The budget ledger's writer: rows written, coalesced when possible, and balances that agree either way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.gateway.budget_ledger import BudgetLedger
from hearth.store.db import create_engine, migrate
from hearth.store.tables import budget_ledger

KEY = "daily|app|app|d20261129"


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(database_url)
    await migrate(eng)
    try:
        yield eng
    finally:
        await eng.dispose()


async def rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        result = await conn.execute(select(budget_ledger).order_by(budget_ledger.c.id))
        return [dict(r) for r in result.mappings().all()]


async def test_a_call_settled_before_its_reservation_was_written_becomes_one_call_row(engine: AsyncEngine) -> None:
    ledger = BudgetLedger(engine)
    ledger.reserved("c1", "daily", KEY, 1000)
    ledger.settled("c1", "daily", KEY, charged=300, refund=700, overrun=5)
    await ledger.flush()
    written = await rows(engine)
    assert [(r["kind"], r["amount"], r["refund"], r["overrun"]) for r in written] == [("call", 300, 700, 5)]
    assert (await ledger.balances())[KEY] == {"used": 300, "spent": 300, "reserved": 0}


async def test_a_call_settled_after_its_reservation_was_written_gets_a_settle_row(engine: AsyncEngine) -> None:
    ledger = BudgetLedger(engine)
    ledger.reserved("c1", "daily", KEY, 1000)
    await ledger.flush()
    assert (await ledger.balances())[KEY] == {"used": 1000, "spent": 0, "reserved": 1000}
    ledger.settled("c1", "daily", KEY, charged=300, refund=700, overrun=0)
    await ledger.flush()
    assert [r["kind"] for r in await rows(engine)] == ["reserve", "settle"]
    assert (await ledger.balances())[KEY] == {"used": 300, "spent": 300, "reserved": 0}


async def test_a_settlement_during_the_write_of_its_reservation_is_not_lost(engine: AsyncEngine) -> None:
    ledger = BudgetLedger(engine)
    ledger.reserved("c1", "daily", KEY, 1000)
    writing = asyncio.create_task(ledger.flush())
    await asyncio.sleep(0)  # the writer has taken the reservation row and is waiting on the database
    ledger.settled("c1", "daily", KEY, charged=400, refund=600, overrun=0)
    await writing
    await ledger.flush()
    assert [(r["kind"], r["amount"]) for r in await rows(engine)] == [("reserve", 1000), ("settle", 400)]
    assert (await ledger.balances())[KEY] == {"used": 400, "spent": 400, "reserved": 0}


async def test_mixed_rows_add_up_per_counter(engine: AsyncEngine) -> None:
    ledger = BudgetLedger(engine)
    other = "tokens|app|u1|m202611"
    ledger.reserved("a", "daily", KEY, 100)
    ledger.reserved("a", "monthly", other, 50)
    ledger.settled("a", "daily", KEY, charged=60, refund=40, overrun=0)  # coalesced
    ledger.reserved("b", "daily", KEY, 200)  # open: never settled (its process died) → counts as spent
    await ledger.flush()
    ledger.settled("a", "monthly", other, charged=50, refund=0, overrun=0)  # after the write
    await ledger.flush()
    balances = await ledger.balances()
    assert balances[KEY] == {"used": 260, "spent": 60, "reserved": 200}
    assert balances[other] == {"used": 50, "spent": 50, "reserved": 0}
    assert sorted(r["kind"] for r in await rows(engine)) == ["call", "reserve", "reserve", "settle"]
