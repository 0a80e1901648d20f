"""``GET /api/v1/request-logs`` counts matching rows only up to a cap (a count over a million rows was the
slowest list query of the console-at-scale bench); beyond it the answer says the total is capped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hearth.observability import request_log
from hearth.observability.request_log import query_request_logs
from hearth.store.tables import request_logs


async def test_the_total_is_exact_up_to_the_cap_and_capped_beyond(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime.now(UTC)
    base = {"route": "chat", "model": "m", "stream": False, "attempts": 1, "prompt_tokens": 1, "completion_tokens": 1,
            "usage_estimated": False, "cost": 0.0, "latency_ms": 1.0, "fallback_used": False}
    async with engine.begin() as conn:
        await conn.execute(request_logs.insert(), [
            {**base, "request_id": f"r{i}", "caller": "a" if i < 5 else "b", "status": 200,
             "created_at": now - timedelta(seconds=i)} for i in range(8)])  # r0: the newest, with the smallest id
    monkeypatch.setattr(request_log, "TOTAL_CAP", 6)
    total, capped, items = await query_request_logs(engine, {}, None, None, limit=2, offset=0)
    assert (total, capped, [i["request_id"] for i in items]) == (6, True, ["r0", "r1"])  # newest first
    total, capped, items = await query_request_logs(engine, {"caller": "a"}, None, None, limit=10, offset=3)
    assert (total, capped, len(items)) == (5, False, 2)
