"""insert_rows stores exactly what SQLAlchemy's own executemany stores, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.rows_insert import insert_rows
from hearth.store.tables import budget_ledger, request_logs


def _log_row(request_id: str, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c.key: None for c in request_logs.columns if c.key != "id"}
    row.update(request_id=request_id, created_at=datetime(2026, 12, 1, 8, 0, 0, 120, tzinfo=UTC), route="chat",
               stream=True, status=200, attempts=2, prompt_tokens=3, completion_tokens=4, usage_estimated=False,
               cost=0.25, latency_ms=1.5, fallback_used=True, attempted_models=["a", "b"],
               attempt_log=[{"endpoint": "e", "status": 502, "error_code": None, "latency_ms": 0.5}])
    row.update(extra)
    return row


async def _read(engine: AsyncEngine, table: Any, order: Any) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(table).order_by(order))).mappings().all()
    return [{k: v for k, v in r.items() if k != "id"} for r in rows]


async def test_ledger_rows_read_back_as_sqlalchemy_wrote_them(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    rows = [{"call_id": f"call-{i}", "budget": "daily", "counter_key": "daily|caller:a|2026-12-01", "kind": "reserve",
             "calls": 1 + i, "amount": 10 * i, "refund": 0, "overrun": 0,
             "created_at": now + timedelta(microseconds=i % 2)}
            for i in range(5)]
    async with engine.begin() as conn:
        await insert_rows(conn, budget_ledger, rows[:3])
        await conn.execute(budget_ledger.insert(), rows[3:])
    got = await _read(engine, budget_ledger, budget_ledger.c.id)
    assert [r["call_id"] for r in got] == [r["call_id"] for r in rows]
    for mine, theirs in zip(got, rows, strict=True):
        assert {**mine, "created_at": mine["created_at"].replace(tzinfo=UTC)} == theirs
    async with engine.connect() as conn:  # stored alike: string comparisons on SQLite still order them
        since = await conn.scalar(select(budget_ledger.c.call_id).where(budget_ledger.c.created_at > now)
                                  .order_by(budget_ledger.c.id).limit(1))
    assert since == "call-1"


async def test_json_and_null_values_match_sqlalchemys_own_insert(engine: AsyncEngine) -> None:
    mine = [_log_row("fast-1"), _log_row("fast-2", attempted_models=None, attempt_log=[], ttft_ms=None)]
    theirs = [_log_row("slow-1"), _log_row("slow-2", attempted_models=None, attempt_log=[], ttft_ms=None)]
    async with engine.begin() as conn:
        await insert_rows(conn, request_logs, mine)
        await conn.execute(request_logs.insert(), theirs)
    got = {r["request_id"]: r for r in await _read(engine, request_logs, request_logs.c.id)}
    for a, b in (("fast-1", "slow-1"), ("fast-2", "slow-2")):
        assert {**got[a], "request_id": ""} == {**got[b], "request_id": ""}
    assert got["fast-1"]["attempted_models"] == ["a", "b"]


async def test_a_row_with_other_keys_goes_through_sqlalchemy(engine: AsyncEngine) -> None:
    """A row that sets its own id, or leaves a column to its default, is written as SQLAlchemy would."""
    base = {"call_id": "x", "budget": "daily", "counter_key": "k", "kind": "settle", "amount": 1,
            "created_at": datetime.now(UTC)}
    async with engine.begin() as conn:
        await insert_rows(conn, budget_ledger, [{**base, "id": 4242, "refund": 0, "overrun": 0}])
        await insert_rows(conn, budget_ledger, [{**base, "call_id": "y"}])  # refund, overrun: defaults
    async with engine.connect() as conn:
        got = (await conn.execute(select(budget_ledger.c.call_id, budget_ledger.c.id, budget_ledger.c.refund,
                                         budget_ledger.c.overrun).order_by(budget_ledger.c.call_id))).all()
    assert tuple(got[0]) == ("x", 4242, 0, 0)
    assert [(r[0], r[2], r[3]) for r in got] == [("x", 0, 0), ("y", 0, 0)]
