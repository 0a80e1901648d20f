"""Request-log rollups on SQLite and PostgreSQL: the writer adds them in the batch's transaction and they agree
with the raw rows per minute/hour, caller, model, endpoint and status class; a refused row is in neither; the
rebuild reproduces them from the raw rows; pruning keeps each grain's retention; the p95 estimate."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update

from hearth.observability.request_log import RequestLogWriter
from hearth.observability.request_rollups import (
    GRAINS,
    LATENCY_BOUNDS_MS,
    SUMS,
    p95_ms,
    prune_rollups,
    rebuild_rollups,
    status_class,
)
from hearth.store.tables import request_logs, request_rollups_hour, request_rollups_minute
from tests.support import request_log_record as record

T0 = datetime(2026, 3, 1, 23, 58, 10, tzinfo=UTC)  # two minutes before midnight: minutes, hours and days change


def traffic() -> list[Any]:
    """40 calls over 6 minutes across two hours (and two days), two callers, two models, an error or two."""
    out = []
    for i in range(40):
        out.append(record(i, created_at=T0 + timedelta(seconds=9 * i), caller=("a", "b", None)[i % 3],
                          model=("m1", "m2")[i % 2], endpoint=None if i % 7 == 0 else f"ep{i % 2}",
                          status=(200, 200, 429, 500, 200)[i % 5], prompt_tokens=i, completion_tokens=2 * i,
                          cost=0.001 * i, latency_ms=float(3 * i * i)))
    return out


async def rollups(engine: Any, grain: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    table = GRAINS[grain][1]
    async with engine.connect() as conn:
        rows = (await conn.execute(select(table))).mappings().all()
    return {(r["bucket"], r["caller"], r["model"], r["endpoint"], r["status_class"]):
            tuple(round(r[name], 9) if name in ("cost", "latency_ms_sum") else r[name] for name in SUMS)
            for r in rows}


async def from_raw(engine: Any, width_s: int) -> dict[tuple[Any, ...], tuple[int, int, int, int, float]]:
    """Calls, errors, tokens in/out and cost per bucket and dimensions, computed from the raw rows here."""
    async with engine.connect() as conn:
        rows = (await conn.execute(select(request_logs))).mappings().all()
    out: dict[tuple[Any, ...], list[Any]] = {}
    for r in rows:
        created = r["created_at"] if r["created_at"].tzinfo else r["created_at"].replace(tzinfo=UTC)
        key = (int(created.timestamp()) // width_s * width_s, r["caller"] or "", r["model"] or "", r["endpoint"] or "",
               r["status"] // 100)
        sums = out.setdefault(key, [0, 0, 0, 0, 0.0])
        sums[0] += 1
        sums[1] += r["status"] >= 400
        sums[2] += r["prompt_tokens"]
        sums[3] += r["completion_tokens"]
        sums[4] += r["cost"]
    return {k: (v[0], v[1], v[2], v[3], round(v[4], 9)) for k, v in out.items()}


def headline(table: dict[tuple[Any, ...], tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    return {k: (*v[:4], round(v[4], 9)) for k, v in table.items()}


async def write(engine: Any, records: list[Any], batch: int = 500) -> RequestLogWriter:
    writer = RequestLogWriter(engine, batch=batch)
    for r in records:
        writer.submit(r)
    assert await writer.flush() is True
    await writer.stop()  # closes the one-hop writer's connection and thread
    return writer


async def test_the_writer_adds_rollups_that_agree_with_the_raw_rows(engine):
    await write(engine, traffic()[:25], batch=7)  # several batches, several transactions adding to the same rows
    await write(engine, traffic()[25:])
    for grain, (width_s, _) in GRAINS.items():
        got = await rollups(engine, grain)
        assert headline(got) == await from_raw(engine, width_s), grain
        assert sum(v[0] for v in got.values()) == 40
        for sums in got.values():  # every call counted once in the histogram, latency sums kept
            assert sum(sums[SUMS.index("lat_0"):]) == sums[0]
    minutes = await rollups(engine, "minute")
    key = (int(T0.timestamp()) // 60 * 60, "a", "m1", "", 2)  # call 0: caller a, model m1, no endpoint, 200
    assert minutes[key][:4] == (1, 0, 0, 0) and minutes[key][SUMS.index("lat_0")] == 1
    assert {k[0] for k in await rollups(engine, "hour")} == {int(T0.timestamp()) // 3600 * 3600,
                                                              int(T0.timestamp()) // 3600 * 3600 + 3600}
    assert {k[0] for k in await rollups(engine, "day")} == {int(T0.timestamp()) // 86400 * 86400,
                                                             int(T0.timestamp()) // 86400 * 86400 + 86400}


async def test_on_a_sqlite_file_a_batch_and_its_rollups_are_one_hop_and_the_same_rows(engine):
    """The one-hop path (a SQLite file) writes what the general path writes: the test above checks the values on
    both databases; this one that SQLite really took the one-hop path, and PostgreSQL the general one."""
    writer = await write(engine, traffic()[:25], batch=7)
    expected = 4 if engine.dialect.name == "sqlite" else 0  # 25 rows in batches of 7
    assert writer.one_hop_batches == expected and writer.stats()["written"] == 25
    assert sum(v[0] for v in (await rollups(engine, "day")).values()) == 25


async def test_a_row_the_database_refuses_is_in_neither_the_logs_nor_the_rollups(engine):
    good = traffic()[:5]
    writer = await write(engine, [*good[:2], record(99, status="x", created_at=T0), *good[2:]])
    assert writer.stats()["dead"] == 1 and writer.stats()["written"] == 5
    got = await rollups(engine, "minute")
    assert sum(v[0] for v in got.values()) == 5
    assert headline(got) == await from_raw(engine, 60)


async def test_rebuild_reproduces_the_writers_rollups_and_keeps_those_before_since(engine):
    await write(engine, traffic())
    written = {grain: await rollups(engine, grain) for grain in GRAINS}
    async with engine.begin() as conn:  # lose and damage them
        await conn.execute(delete(request_rollups_minute))
        await conn.execute(update(request_rollups_hour).values(calls=request_rollups_hour.c.calls + 5))
    seen = []
    report = await rebuild_rollups(engine, since=None, until=T0 + timedelta(minutes=10), page_rows=6,
                                   on_progress=seen.append)
    assert report.rows == 40 and report.since == T0.replace(hour=0, minute=0, second=0)  # from the day's start
    assert {grain: await rollups(engine, grain) for grain in GRAINS} == written
    assert seen[-1].days_done == seen[-1].days == 2 and seen[-1].rows == 40  # the range crosses midnight
    assert [p.rows for p in seen] == sorted(p.rows for p in seen)

    async with engine.begin() as conn:  # an old rollup the raw rows no longer back: kept before since only
        await conn.execute(request_rollups_minute.insert().values(
            bucket=0, caller="old", model="m", endpoint="e", status_class=2,
            **{name: 1 for name in SUMS}))
    again = await rebuild_rollups(engine, since=T0 + timedelta(minutes=3), until=T0 + timedelta(minutes=10))
    assert again.since == datetime(2026, 3, 2, tzinfo=UTC) and 0 < again.rows < 40
    after = await rollups(engine, "minute")
    assert after.pop((0, "old", "m", "e", 2)) == (1,) * len(SUMS) and after == written["minute"]
    assert (await rebuild_rollups(engine, since=T0 + timedelta(days=5), until=T0 + timedelta(days=6))).rows == 0


async def test_rebuild_of_an_empty_log_says_so(engine):
    report = await rebuild_rollups(engine, since=None)
    assert report.since is None and report.rows == 0


async def test_pruning_deletes_each_grain_after_its_own_retention(engine):
    await write(engine, traffic())
    now_s = T0.timestamp() + 3600
    deleted = await prune_rollups(engine, now_s, minute_keep_s=3600 - 130, hour_keep_s=10 * 86_400)
    async with engine.connect() as conn:
        minutes = (await conn.execute(select(func.min(request_rollups_minute.c.bucket)))).scalar_one()
        hours = (await conn.execute(select(func.count()).select_from(request_rollups_hour))).scalar_one()
    assert deleted > 0 and minutes >= now_s - (3600 - 130) and hours > 0
    await prune_rollups(engine, now_s + 86_400, minute_keep_s=1.0, hour_keep_s=1.0)
    assert [await rollups(engine, grain) for grain in GRAINS] == [{}, {}, {}]


def test_p95_is_interpolated_inside_its_histogram_bucket():
    histogram = [0] * (len(LATENCY_BOUNDS_MS) + 1)
    assert p95_ms(histogram) == 0.0
    histogram[0] = 95  # ≤ 10 ms
    histogram[3] = 5  # 50–100 ms
    assert p95_ms(histogram) == pytest.approx(10.0)
    histogram[0] = 90
    histogram[3] = 10  # rank 95 is the 5th of 10 calls in 50–100 ms
    assert p95_ms(histogram) == pytest.approx(75.0)
    histogram[3], histogram[-1] = 0, 10  # beyond the last bound: its lower bound, never an invention
    assert p95_ms(histogram) == LATENCY_BOUNDS_MS[-1]


def test_status_classes():
    assert [status_class(s) for s in (200, 302, 429, 499, 503, 0, 600)] == [2, 3, 4, 4, 5, 0, 0]


async def test_a_rebuild_while_the_writer_writes_counts_every_row_once(engine):
    await write(engine, traffic()[:20])
    writer = RequestLogWriter(engine, batch=3)

    async def keep_writing() -> None:
        for r in traffic()[20:]:
            writer.submit(r)
            await writer.flush()
            await asyncio.sleep(0)

    await asyncio.gather(rebuild_rollups(engine, since=None, until=T0 + timedelta(minutes=10), page_rows=2),
                         keep_writing())
    for grain, (width_s, _) in GRAINS.items():
        got = await rollups(engine, grain)
        assert headline(got) == await from_raw(engine, width_s), grain
        assert sum(v[0] for v in got.values()) == 40
