"""Request-log rollups: calls, errors, tokens, cost and a latency histogram per minute, hour and UTC day.

The console's charts and usage tables read these instead of the raw ``request_logs`` (a million rows
there must not slow a page). Each aggregate row is keyed by its bucket (the epoch second its minute, hour
or day starts) and bounded dimensions — caller, model (public name), endpoint, status class — so the
tables grow with time × configuration, never with traffic.

Written by :class:`hearth.observability.request_log.RequestLogWriter` in the same transaction as the
log rows it aggregates (:func:`add_to_rollups`, an ``INSERT … ON CONFLICT DO UPDATE`` that adds, on
SQLite and PostgreSQL alike): a batch is in both or in neither, and nothing runs on the request path.
Keys are written in sorted order, so two processes adding to the same rows lock them in the same order
and never deadlock each other.

Latency is kept as counts per fixed bucket (:data:`LATENCY_BOUNDS_MS`): histograms of any set of rows
add up, and :func:`p95_ms` estimates a percentile from the sum (linear inside the bucket it falls in).

:func:`rebuild_rollups` recomputes them from the raw rows (``hearth rollups rebuild``), one UTC day per
transaction; :func:`prune_rollups` deletes rows older than their retention. This module owns the
``request_rollups_minute`` and ``request_rollups_hour`` tables.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, Final

from sqlalchemy import Table, delete, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.store.db import write_transaction
from hearth.store.rows_insert import insert_rows
from hearth.store.tables import (
    ROLLUP_LATENCY_BUCKETS,
    request_logs,
    request_rollups_day,
    request_rollups_hour,
    request_rollups_minute,
)

#: Upper bounds (inclusive, ms) of the latency buckets; the last bucket holds everything slower.
LATENCY_BOUNDS_MS: Final = (10.0, 25.0, 50.0, 100.0, 200.0, 300.0, 500.0, 750.0, 1_000.0, 1_500.0, 2_000.0,
                            3_000.0, 5_000.0, 10_000.0, 30_000.0)
assert len(LATENCY_BOUNDS_MS) + 1 == ROLLUP_LATENCY_BUCKETS

#: grain → (seconds per bucket, table)
GRAINS: Final[dict[str, tuple[int, Table]]] = {"minute": (60, request_rollups_minute),
                                               "hour": (3_600, request_rollups_hour),
                                               "day": (86_400, request_rollups_day)}
KEYS: Final = ("bucket", "caller", "model", "endpoint", "status_class")
HISTOGRAM: Final = tuple(f"lat_{i}" for i in range(ROLLUP_LATENCY_BUCKETS))
SUMS: Final = ("calls", "errors", "prompt_tokens", "completion_tokens", "cost", "latency_ms_sum", *HISTOGRAM)
_FIRST_BIN: Final = SUMS.index("lat_0")
_COLUMNS: Final = (*KEYS, *SUMS)
_DAY_S: Final = 86_400

Key = tuple[int, str, str, str, int]
Aggregates = dict[Key, list[Any]]  # SUMS, in order: integers but cost and latency_ms_sum


def status_class(status: int) -> int:
    """2, 3, 4 or 5 for an HTTP status; 0 for anything else (a client that went away is logged as 499: 4)."""
    return status // 100 if 200 <= status <= 599 else 0


def epoch_s(when: datetime) -> float:
    """Seconds since the epoch; a naive datetime (SQLite hands them back so) is UTC."""
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def accumulate(into: Aggregates, rows: Iterable[Mapping[Any, Any]], width_s: int) -> Aggregates:
    """Add request-log rows (mappings with the table's column names) to ``into``, bucketed by ``width_s``.

    A value of the wrong type raises ``TypeError`` or ``ValueError``: in the writer's transaction that refuses
    the batch, whose bad row is then isolated like any row the database refuses.
    """
    bins = LATENCY_BOUNDS_MS
    for row in rows:
        status = int(row["status"])
        latency = float(row["latency_ms"])
        created = row["created_at"]
        at = created.timestamp() if created.tzinfo is not None else epoch_s(created)  # inlined: once per record
        key = (int(at // width_s) * width_s, row["caller"] or "", row["model"] or "", row["endpoint"] or "",
               status // 100 if 200 <= status <= 599 else 0)  # status_class(), inlined
        sums = into.get(key)
        if sums is None:
            sums = into[key] = [0] * len(SUMS)
        sums[0] += 1
        sums[1] += status >= 400
        sums[2] += int(row["prompt_tokens"])
        sums[3] += int(row["completion_tokens"])
        sums[4] += float(row["cost"])
        sums[5] += latency
        sums[_FIRST_BIN + (bisect_left(bins, latency) if latency == latency else len(bins))] += 1
    return into


def coarsen(minutes: Aggregates, width_s: int) -> Aggregates:
    """Minute aggregates summed into buckets of ``width_s`` (a multiple of 60): the hour and day rollups cost
    one pass over the (few) minute keys instead of another over the records."""
    if width_s == 60:
        return minutes
    out: Aggregates = {}
    for (bucket, caller, model, endpoint, status), sums in minutes.items():
        key = (bucket // width_s * width_s, caller, model, endpoint, status)
        into = out.get(key)
        if into is None:
            out[key] = list(sums)
        else:
            for i, value in enumerate(sums):
                into[i] += value
    return out


def _values(aggregates: Aggregates) -> list[dict[str, Any]]:
    """Parameter rows, in key order (the lock order every writer shares)."""
    return [dict(zip(_COLUMNS, (*key, *aggregates[key]), strict=True)) for key in sorted(aggregates)]


_adding: dict[tuple[str, str], Any] = {}


def _adding_upsert(table: Table, dialect: str) -> Any:
    """``INSERT … ON CONFLICT (key) DO UPDATE SET sum = sum + excluded.sum`` for ``table`` (built once)."""
    stmt = _adding.get((table.name, dialect))
    if stmt is None:
        insert = postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
        stmt = _adding[(table.name, dialect)] = insert.on_conflict_do_update(
            index_elements=list(KEYS), set_={name: table.c[name] + insert.excluded[name] for name in SUMS})
    return stmt


async def add_to_rollups(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Add ``rows`` (request-log rows just inserted on ``conn``) to the minute and hour rollups, on ``conn``."""
    if not rows:
        return
    minutes = accumulate({}, rows, 60)
    for width_s, table in GRAINS.values():
        await conn.execute(_adding_upsert(table, conn.dialect.name), _values(coarsen(minutes, width_s)))


_driver_plans: dict[str, list[tuple[str, tuple[str, ...]]]] = {}


def rollup_statements(dialect: Dialect, rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """What :func:`add_to_rollups` runs, as ``(sql, parameter rows)`` for a caller that drives the database
    itself (:class:`~hearth.store.direct_sqlite.DirectSqliteWriter`): the same upserts, the same values."""
    if not rows:
        return []
    plans = _driver_plans.get(dialect.name)
    if plans is None:
        plans = []
        for _width, table in GRAINS.values():
            compiled = _adding_upsert(table, dialect.name).compile(dialect=dialect, column_keys=list(_COLUMNS))
            order = tuple(compiled.positiontup or ())
            if set(order) != set(_COLUMNS):
                raise ValueError(f"the rollup upsert of {table.name} does not bind each column once")
            plans.append((str(compiled), order))
        _driver_plans[dialect.name] = plans
    minutes = accumulate({}, rows, 60)
    out = []
    for (width_s, _table), (sql, order) in zip(GRAINS.values(), plans, strict=True):
        out.append((sql, [tuple(values[k] for k in order) for values in _values(coarsen(minutes, width_s))]))
    return out


async def prune_rollups(engine: AsyncEngine, now_s: float, *, minute_keep_s: float, hour_keep_s: float) -> int:
    """Delete minute rows older than ``minute_keep_s`` and hour and day rows older than ``hour_keep_s``; how many.

    The hour and day rows outlive the minute rows: windows of a day and more read them (``rollup_reports``).
    """
    deleted = 0
    async with write_transaction(engine) as conn:
        for table, keep_s in ((request_rollups_minute, minute_keep_s), (request_rollups_hour, hour_keep_s),
                              (request_rollups_day, hour_keep_s)):
            result = await conn.execute(delete(table).where(table.c.bucket < now_s - keep_s))
            deleted += max(result.rowcount or 0, 0)
    return deleted


def p95_ms(histogram: Sequence[float], q: float = 0.95) -> float:
    """The ``q`` quantile of latencies counted in ``histogram`` (one count per bucket), interpolated linearly
    inside its bucket; the open last bucket answers its lower bound (a floor, never an invention)."""
    total = sum(histogram)
    if total <= 0:
        return 0.0
    rank = max(1.0, math.ceil(q * total))
    seen = 0.0
    for i, count in enumerate(histogram):
        if count and seen + count >= rank:
            if i >= len(LATENCY_BOUNDS_MS):
                return LATENCY_BOUNDS_MS[-1]
            low = LATENCY_BOUNDS_MS[i - 1] if i else 0.0
            return low + (LATENCY_BOUNDS_MS[i] - low) * (rank - seen) / count
        seen += count
    return LATENCY_BOUNDS_MS[-1]


# --------------------------------------------------------------------------- rebuild from the raw rows

@dataclass(frozen=True, slots=True)
class RebuildProgress:
    days_done: int
    days: int
    rows: int  # raw rows read so far


@dataclass(frozen=True, slots=True)
class RebuildReport:
    since: datetime | None  # the first day rebuilt (None: there were no request logs)
    until: datetime | None
    rows: int  # raw rows read
    written: dict[str, int]  # rollup rows written per grain


_RAW_COLUMNS: Final = (request_logs.c.id, request_logs.c.created_at, request_logs.c.caller, request_logs.c.model,
                       request_logs.c.endpoint, request_logs.c.status, request_logs.c.prompt_tokens,
                       request_logs.c.completion_tokens, request_logs.c.cost, request_logs.c.latency_ms)


async def _first_log_at(engine: AsyncEngine) -> datetime | None:
    async with engine.connect() as conn:
        first = (await conn.execute(select(request_logs.c.created_at).order_by(request_logs.c.created_at)
                                    .limit(1))).scalar()
    return first if isinstance(first, datetime) else None


async def _rebuild_range(conn: AsyncConnection, start_s: int, end_s: int, *, page_rows: int,
                         on_page: Callable[[int], None]) -> dict[str, int]:
    """Replace the rollups of ``[start_s, end_s)`` (from a day's start) by the aggregates of its raw rows; the
    rows written per grain.

    Writers are held off before anything is read, so a batch committed meanwhile is either read here or adds
    itself after this transaction — never both, never neither: on PostgreSQL the rollup tables are locked
    (writers' upserts wait), on SQLite the first DELETE takes the database's write lock (writers wait in
    their busy timeout) before the transaction's snapshot is read.
    """
    if conn.dialect.name == "postgresql":
        await conn.execute(text("LOCK TABLE request_rollups_minute, request_rollups_hour, request_rollups_day "
                                "IN SHARE ROW EXCLUSIVE MODE"))
    for _, table in GRAINS.values():
        await conn.execute(delete(table).where(table.c.bucket >= start_s, table.c.bucket < end_s))
    t = request_logs
    low, high = datetime.fromtimestamp(start_s, UTC), datetime.fromtimestamp(end_s, UTC)
    minutes: Aggregates = {}
    after: tuple[datetime, int] | None = None
    while True:
        conds: list[Any] = [t.c.created_at >= low, t.c.created_at < high]
        if after is not None:
            conds.append((t.c.created_at > after[0]) | ((t.c.created_at == after[0]) & (t.c.id > after[1])))
        page = (await conn.execute(select(*_RAW_COLUMNS).where(*conds).order_by(t.c.created_at, t.c.id)
                                   .limit(page_rows))).mappings().all()
        if not page:
            break
        accumulate(minutes, page, 60)
        on_page(len(page))
        after = (page[-1]["created_at"], int(page[-1]["id"]))
        if len(page) < page_rows:
            break
    written = {}
    for grain, (width_s, table) in GRAINS.items():
        aggregates = coarsen(minutes, width_s)
        await insert_rows(conn, table, _values(aggregates))
        written[grain] = len(aggregates)
    return written


async def rebuild_rollups(engine: AsyncEngine, *, since: datetime | None, until: datetime | None = None,
                          page_rows: int = 20_000,
                          on_progress: Callable[[RebuildProgress], None] | None = None) -> RebuildReport:
    """Recompute the rollups from ``request_logs``, from the start of the UTC day ``since`` falls in (default:
    the first log row's) to the end of the hour ``until`` falls in (default: now), one UTC day per
    transaction, reading raw rows in keyset pages of ``page_rows`` on ``(created_at, id)``.

    Idempotent; safe while servers write (see :func:`_rebuild_range`). Rollups before that day are kept.
    """
    first = since if since is not None else await _first_log_at(engine)
    if first is None:
        return RebuildReport(None, None, 0, {})
    start_s = int(epoch_s(first) // _DAY_S) * _DAY_S
    end_s = int(epoch_s(until or datetime.now(UTC)) // 3_600) * 3_600 + 3_600
    if end_s <= start_s:  # since is later than now: nothing to read
        return RebuildReport(datetime.fromtimestamp(start_s, UTC), datetime.fromtimestamp(start_s, UTC), 0, {})
    cuts = [*range(start_s, end_s, _DAY_S), end_s]
    days = len(cuts) - 1
    rows = 0
    written: dict[str, int] = dict.fromkeys(GRAINS, 0)

    def page_done(n: int) -> None:
        nonlocal rows
        rows += n
        if on_progress is not None:
            on_progress(RebuildProgress(done, days, rows))

    for done, (low, high) in enumerate(pairwise(cuts)):
        async with write_transaction(engine) as conn:
            for grain, count in (await _rebuild_range(conn, low, high, page_rows=page_rows, on_page=page_done)).items():
                written[grain] += count
        if on_progress is not None:
            on_progress(RebuildProgress(done + 1, days, rows))
    return RebuildReport(datetime.fromtimestamp(start_s, UTC), datetime.fromtimestamp(end_s, UTC), rows, written)
