"""Request logs: one row per call (success or failure), filters, paging, and the batch writer."""

from __future__ import annotations

import asyncio
from typing import Any

from hearth.testing.fake_upstream import FakeBehavior
from tests.support import ADMIN, AUTH, chat_body, gateway_registry


async def _logs(http: Any, server: Any, want: int, **params: Any) -> dict[str, Any]:
    for _ in range(60):
        data: dict[str, Any] = (await http.get(server.base_url + "/api/v1/request-logs", params=params,
                                               headers=ADMIN)).json()["data"]
        if data["total"] >= want:
            return data
        await asyncio.sleep(0.05)
    return data


async def test_every_call_is_logged_with_usage_cost_and_filters_work(database_url, fake, hearth_server, http):
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}],
                                prices=[{"model": "a", "input_per_1m": 10.0, "output_per_1m": 30.0}])
    server = hearth_server(registry, database_url=database_url)
    fake.script(FakeBehavior(status=400))
    await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    for i in range(5):
        await http.post(server.base_url + "/v1/chat/completions", json=chat_body(user=f"u{i % 2}"), headers=AUTH)
    data = await _logs(http, server, 6)
    assert data["total"] == 6
    failed = [row for row in data["items"] if row["status"] == 400]
    assert len(failed) == 1 and failed[0]["error_code"] == "upstream_rejected_request"
    ok = [row for row in data["items"] if row["status"] == 200]
    row = ok[0]
    assert row["caller"] == "tester" and row["endpoint"] == "a" and row["upstream_model"] == "up"
    assert row["completion_tokens"] == 20 and row["attempts"] == 1
    assert abs(row["cost"] - (row["prompt_tokens"] * 10 + 20 * 30) / 1e6) < 1e-12
    page = await _logs(http, server, 1, end_user="u1", limit=1, offset=1)
    assert page["total"] == 2 and len(page["items"]) == 1
    assert (await _logs(http, server, 1, status=400))["total"] == 1


async def test_full_log_queue_drops_and_counts_instead_of_blocking(fake, hearth_server, http):
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    server = hearth_server(registry, request_log_queue=3, request_log_batch=1000, request_log_flush_s=30)
    results = await asyncio.gather(*[http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                                               headers=AUTH) for _ in range(10)])
    assert all(r.status_code == 200 for r in results)
    stats = (await http.get(server.base_url + "/api/v1/admin/stats", headers=ADMIN)).json()["data"]
    writer = stats["request_log_writer"]
    assert writer["pending"] == 3 and writer["dropped"] == 7
