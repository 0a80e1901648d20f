"""Reading the budget ledger: balances, the snapshot a rebuild installs, and the expiry sweep.

Row kinds: ``reserve`` (amount = reserved) and ``settle`` (amount = charged — the real cost, more
than reserved when ``overrun`` > 0 — and ``refund`` = what the reservation gave back); older rows
of kind ``call`` hold both in one (reserved ``amount + refund``, charged ``amount``). Per counter:

* ``used`` = reserved − refunded + overrun — what the state backend's counter should hold;
* ``spent`` = the settled charges; ``reserved`` = used − spent (reservations still open).

A reservation whose settlement never came (its process died) is closed by :func:`sweep_expired`
as spent once no live call can still hold it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, case, exists, func, literal, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.store.db import write_transaction
from hearth.store.tables import budget_ledger, meta

_SETTLED = ("settle", "call")


@dataclass(slots=True, frozen=True)
class Balance:
    used: int
    spent: int
    reserved: int

    def as_dict(self) -> dict[str, int]:
        return {"used": self.used, "spent": self.spent, "reserved": self.reserved}


@dataclass(slots=True, frozen=True)
class RebuildSnapshot:
    """What a rebuild installs: every counter's ``used``, the calls whose reservation is open, the mark."""

    balances: dict[str, Balance]
    open_calls: tuple[str, ...]
    mark: int  # the highest ledger row id read


async def balances(engine: AsyncEngine, counter_keys: list[str] | None = None) -> dict[str, Balance]:
    async with engine.connect() as conn:
        return await _balances(conn, counter_keys)


async def _balances(conn: AsyncConnection, counter_keys: list[str] | None) -> dict[str, Balance]:
    c = budget_ledger.c
    settled = c.kind.in_(_SETTLED)
    stmt = select(
        c.counter_key,
        func.sum(case((c.kind == "reserve", c.amount), (c.kind == "call", c.amount + c.refund),
                      else_=0)).label("reserved_all"),
        func.sum(case((settled, c.amount), else_=0)).label("spent"),
        func.sum(case((settled, c.refund), else_=0)).label("refunded"),
        func.sum(case((c.kind == "settle", c.overrun), else_=0)).label("overrun"),
    ).group_by(c.counter_key)
    if counter_keys is not None:
        stmt = stmt.where(c.counter_key.in_(counter_keys))
    out: dict[str, Balance] = {}
    for r in (await conn.execute(stmt)).mappings():
        used = int(r["reserved_all"] or 0) - int(r["refunded"] or 0) + int(r["overrun"] or 0)
        spent = int(r["spent"] or 0)
        out[r["counter_key"]] = Balance(used, spent, used - spent)
    return out


async def rebuild_snapshot(engine: AsyncEngine, open_within_s: float) -> RebuildSnapshot:
    """Balances, open reservations (younger than ``open_within_s``) and the highest row id, read so
    that every row with an id up to the mark is included: on PostgreSQL a SHARE lock waits for
    transactions still inserting (their ids may be lower than committed ones) and holds new ones
    off for the duration of the read; SQLite has one writer, and a row committed later gets a
    higher id."""
    c = budget_ledger.c
    settle = budget_ledger.alias("s")
    since = datetime.now(UTC) - timedelta(seconds=open_within_s)
    async with engine.connect() as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            await conn.execute(text("LOCK TABLE budget_ledger IN SHARE MODE"))
        mark = int((await conn.execute(select(func.coalesce(func.max(c.id), 0)))).scalar_one())
        found = await _balances(conn, None)
        open_rows = await conn.execute(select(c.call_id).distinct().where(
            c.kind == "reserve", c.created_at >= since,
            ~exists().where(settle.c.call_id == c.call_id, settle.c.counter_key == c.counter_key,
                            settle.c.kind == "settle")))
        open_calls = tuple(row[0] for row in open_rows)
    return RebuildSnapshot(found, open_calls, mark)


async def sweep_expired(engine: AsyncEngine, older_than_s: float) -> int:
    """Close reservations older than ``older_than_s`` that were never settled, as spent (charged in
    full, nothing refunded). Safe to run in several processes at once: the unique (call, counter,
    kind) constraint lets one settlement per reservation in, whoever writes it."""
    c = budget_ledger.c
    settle = budget_ledger.alias("s")
    cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
    now = datetime.now(UTC)
    pick = select(c.call_id, c.budget, c.counter_key, literal("settle"), c.amount, literal(0), literal(0),
                  literal(now, budget_ledger.c.created_at.type)).where(
        c.kind == "reserve", c.created_at < cutoff,
        ~exists().where(and_(settle.c.call_id == c.call_id, settle.c.counter_key == c.counter_key,
                             settle.c.kind == "settle")))
    columns = ["call_id", "budget", "counter_key", "kind", "amount", "refund", "overrun", "created_at"]
    async with write_transaction(engine) as conn:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(budget_ledger).from_select(columns, pick).on_conflict_do_nothing()
        result = await conn.execute(stmt)
        return max(0, int(result.rowcount or 0))


_EPOCH_KEY = "state_epoch"


async def last_epoch(engine: AsyncEngine) -> str | None:
    """The last state-backend epoch any process installed (None: this database never had one, so a
    backend without an epoch is new, not one that lost its data)."""
    async with engine.connect() as conn:
        value = (await conn.execute(select(meta.c.value).where(meta.c.key == _EPOCH_KEY))).scalar()
    return None if value is None else str(value)


async def record_epoch(engine: AsyncEngine, encoded: str) -> None:
    async with engine.begin() as conn:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(meta).values(key=_EPOCH_KEY, value=encoded)
        await conn.execute(stmt.on_conflict_do_update(index_elements=[meta.c.key], set_={"value": encoded}))
