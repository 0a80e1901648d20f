"""The overview's bucketing: calls, errors, cost, tokens and p95 latency per time bucket, nothing outside."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hearth.console.charts import bars
from hearth.console.overview import bucketize

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_rows_land_in_their_bucket_and_rows_outside_are_ignored():
    rows = [(T0 + timedelta(seconds=s), status, 0.5, latency, 10)
            for s, status, latency in ((5, 200, 10.0), (59, 500, 30.0), (60, 200, 20.0), (179, 429, 5.0),
                                       (180, 200, 1.0), (-1, 200, 1.0))]
    out = bucketize(rows, since=T0, width=timedelta(minutes=1), count=3)
    assert [(b.calls, b.errors, b.tokens) for b in out] == [(2, 1, 20), (1, 0, 10), (1, 1, 10)]
    assert out[0].cost == 1.0 and out[0].p95_ms == 30.0 and out[1].p95_ms == 20.0
    assert [b.start for b in out] == [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]


def test_p95_is_the_nearest_rank():
    rows = [(T0, 200, 0.0, float(ms), 0) for ms in range(1, 101)]
    assert bucketize(rows, since=T0, width=timedelta(minutes=1), count=1)[0].p95_ms == 95.0


def test_a_chart_escapes_its_labels_and_scales_to_its_maximum():
    svg = str(bars("<b>calls</b>", [("a<script>", 1.0), ("b", 4.0)]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "&lt;b&gt;calls" in svg
    assert 'height="92.0"' in svg  # the maximum fills the plot height (140 - 2 × 24)
    assert "no calls" in str(bars("empty", []))


async def test_recent_calls_reads_the_newest_calls_of_the_window_bounded(engine):
    from hearth.observability.request_log import recent_calls
    from hearth.store.tables import request_logs

    now = datetime.now(UTC).replace(microsecond=0)
    base = {"request_id": "r", "caller": "c", "route": "chat", "model": "m", "endpoint": "e", "stream": False,
            "attempts": 1, "prompt_tokens": 3, "completion_tokens": 4, "usage_estimated": False, "cost": 0.25,
            "fallback_used": False}
    ages = [7200, 50, 40, 30, 20, 10]  # seconds ago; the first is outside a one-hour window
    async with engine.begin() as conn:
        await conn.execute(request_logs.insert(), [
            {**base, "created_at": now - timedelta(seconds=age), "status": 500 if age == 30 else 200,
             "latency_ms": float(age)} for age in ages])
    rows = await recent_calls(engine, since=now - timedelta(hours=1), limit=3)
    assert [(r[0], r[1], r[3]) for r in rows] == [(now - timedelta(seconds=10), 200, 10.0),
                                                 (now - timedelta(seconds=20), 200, 20.0),
                                                 (now - timedelta(seconds=30), 500, 30.0)]
    assert all(r[0].tzinfo is not None and r[2] == 0.25 and r[4] == 7 for r in rows)
    assert len(await recent_calls(engine, since=now - timedelta(hours=1), limit=100)) == 5


async def test_request_log_pages_cover_every_row_once_newest_first(engine):
    from hearth.observability.request_log import request_log_page
    from hearth.store.tables import request_logs

    now = datetime.now(UTC).replace(microsecond=0)
    base = {"route": "chat", "model": "m", "stream": False, "attempts": 1, "prompt_tokens": 1,
            "completion_tokens": 1, "usage_estimated": False, "cost": 0.0, "latency_ms": 1.0, "status": 200,
            "fallback_used": False}
    ages = [5, 4, 4, 4, 3, 2, 1, 1]  # three calls in the same instant, and two more: ties are broken by id
    async with engine.begin() as conn:
        await conn.execute(request_logs.insert(), [
            {**base, "request_id": f"r{i}", "caller": "a" if i % 2 else "b", "created_at": now - timedelta(seconds=age)}
            for i, age in enumerate(ages)])
    newest_first = sorted(range(len(ages)), key=lambda i: (ages[i], -i))  # ids follow insertion order
    for filters, keep in (({}, lambda i: True), ({"caller": "a"}, lambda i: i % 2 == 1)):
        seen, after = [], None
        while True:
            rows, after = await request_log_page(engine, filters, after=after, limit=3)
            seen += [r["request_id"] for r in rows]
            assert all(r["created_at"].tzinfo is not None for r in rows)
            if after is None:
                break
        assert seen == [f"r{i}" for i in newest_first if keep(i)], filters
