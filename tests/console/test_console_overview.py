"""The overview's charts and the request-log list's keyset pages (the rollups behind the charts: test_console_usage)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hearth.console.charts import bars


def test_a_chart_escapes_its_labels_and_scales_to_its_maximum():
    svg = str(bars("<b>calls</b>", [("a<script>", 1.0), ("b", 4.0)]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "&lt;b&gt;calls" in svg
    assert 'height="92.0"' in svg  # the maximum fills the plot height (140 - 2 × 24)
    assert "no calls" in str(bars("empty", []))


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
