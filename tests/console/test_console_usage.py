"""The overview, the callers & usage page and ``GET /api/v1/admin/usage`` read the rollups (rollup rows are
inserted with no raw request log behind them, and their numbers appear), on SQLite and PostgreSQL, over real
HTTP; the API's shape, validation and admin-only access; the windows' bars."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from hearth.observability.request_rollups import SUMS
from hearth.observability.rollup_reports import WINDOWS, traffic_series, usage_report
from hearth.store.db import create_engine
from hearth.store.tables import request_rollups_day, request_rollups_hour, request_rollups_minute
from tests.console.console_client import registry, sign_in

ADMIN = {"Authorization": "Bearer admin-token-xyz"}


def rollup(bucket: int, caller: str, model: str, *, calls: int, errors: int = 0, cost: float = 0.0,
           fast: int | None = None, status_class: int = 2) -> dict[str, Any]:
    """A rollup row: ``fast`` of the calls in the ≤ 10 ms bucket, the rest in 500–750 ms."""
    fast = calls if fast is None else fast
    row: dict[str, Any] = {name: 0 for name in SUMS}
    row.update(bucket=bucket, caller=caller, model=model, endpoint="ep-a", status_class=status_class, calls=calls,
               errors=errors, prompt_tokens=10 * calls, completion_tokens=20 * calls, cost=cost,
               latency_ms_sum=5.0 * calls, lat_0=fast, lat_7=calls - fast)
    return row


async def seed(database_url: str, now_s: float) -> None:
    minute, hour, day = int(now_s) // 60 * 60, int(now_s) // 3600 * 3600, int(now_s) // 86_400 * 86_400
    rows = [rollup(minute, "tester", "m", calls=7, errors=2, cost=0.5, fast=5, status_class=5),
            rollup(minute - 60, "tester", "m", calls=3, cost=0.25),
            rollup(minute - 120, "other", "m2", calls=1, cost=1.0),
            rollup(minute - 7200, "tester", "m", calls=1000)]  # outside the 1h window
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(request_rollups_minute.insert(), rows)
            await conn.execute(request_rollups_hour.insert(), [
                rollup(hour, "tester", "m", calls=40, cost=2.0), rollup(hour - 3600 * 30, "old", "m", calls=9)])
            await conn.execute(request_rollups_day.insert(), [
                rollup(day, "tester", "m", calls=40, cost=2.0), rollup(day - 86_400 * 10, "old", "m", calls=9)])
    finally:
        await engine.dispose()


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    return hearth_server(registry(fake), database_url=database_url)


async def test_overview_and_usage_pages_show_the_rollups(server: Any, database_url: str) -> None:
    await seed(database_url, time.time())
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        await sign_in(client)
        overview = await client.get("/console/overview", params={"window": "1h"})
        assert overview.status_code == 200
        assert '<b data-testid="calls">11</b>' in overview.text and "per-minute rollups" in overview.text
        assert "<b>2</b><span>errors (18.2 %)" in overview.text
        assert "<b>1.7500</b><span>cost" in overview.text and "<b>330</b><span>tokens" in overview.text
        day = await client.get("/console/overview", params={"window": "24h"})
        assert '<b data-testid="calls">40</b>' in day.text and "per-hour rollups" in day.text
        month = await client.get("/console/overview", params={"window": "30d"})
        assert '<b data-testid="calls">49</b>' in month.text and "per-day rollups" in month.text

        usage = await client.get("/console/usage", params={"window": "1h"})
        assert usage.status_code == 200 and 'href="/console/usage"' in usage.text
        rows = re.findall(r'<tr data-group="([^"]*)"><td>[^<]*</td><td class="calls">(\d+)</td>', usage.text)
        assert rows == [("tester", "10"), ("other", "1")]  # most calls first
        assert 'href="/console/budgets?caller=tester"' in usage.text
        assert 'href="/console/request-logs?caller=tester"' in usage.text
        by_model = await client.get("/console/usage", params={"window": "1h", "group_by": "model"})
        assert re.findall(r'<tr data-group="([^"]*)">', by_model.text) == ["m", "m2"]


async def test_the_admin_usage_api_answers_from_the_rollups_for_admins_only(server: Any, database_url: str) -> None:
    await seed(database_url, time.time())
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        r = await client.get("/api/v1/admin/usage", params={"window": "1h"}, headers=ADMIN)
        assert r.status_code == 200, r.text
        data = r.json()["data"]
        assert (data["window"], data["group_by"], data["granularity"]) == ("1h", "caller", "minute")
        assert data["totals"]["calls"] == 11 and data["totals"]["errors"] == 2
        tester = data["items"][0]
        assert tester == {"caller": "tester", "calls": 10, "errors": 2, "error_rate": 0.2, "prompt_tokens": 100,
                          "completion_tokens": 200, "total_tokens": 300, "cost": 0.75, "latency_ms_mean": 5.0,
                          "latency_ms_p95": 750.0}  # 8 fast and 2 slow calls: rank 10 is the top of 500–750 ms
        assert [i["caller"] for i in data["items"]] == ["tester", "other"]
        by_endpoint = (await client.get("/api/v1/admin/usage", params={"window": "7d", "group_by": "endpoint"},
                                        headers=ADMIN)).json()["data"]
        assert by_endpoint["granularity"] == "hour" and by_endpoint["items"][0]["endpoint"] == "ep-a"
        assert (await client.get("/api/v1/admin/usage")).status_code == 401
        assert (await client.get("/api/v1/admin/usage", headers={"Authorization": "Bearer test-key-123"})
                ).status_code in (401, 403)
        bad = await client.get("/api/v1/admin/usage", params={"window": "2y"}, headers=ADMIN)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
        bad = await client.get("/api/v1/admin/usage", params={"group_by": "user"}, headers=ADMIN)
        assert bad.status_code == 400
        spec = (await client.get("/openapi.json")).json()
        assert "/api/v1/admin/usage" in spec["paths"]


async def test_every_window_has_its_bars_and_the_newest_holds_now(engine) -> None:
    now_s = datetime(2026, 3, 2, 10, 17, 30, tzinfo=UTC).timestamp()
    for name, window in WINDOWS.items():
        bars = await traffic_series(engine, window, now_s=now_s)
        assert len(bars) == window.bars, name
        assert bars[-1].start.timestamp() <= now_s < bars[-1].start.timestamp() + window.bar_s, name
        assert all(b.totals.calls == 0 for b in bars)
    report = await usage_report(engine, "6h", "model", now_s=now_s)
    assert report["items"] == [] and report["totals"]["calls"] == 0
