"""A batch's lines are gateway calls like any other: a strict budget is never overspent by a batch, the lines past
it are answered ``budget_exhausted`` in the error file, and a caller's rate limit slows a batch down instead of
failing its lines."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.e2e.task_runs import until
from tests.support import (
    AUTH,
    MAX_TOKENS,
    budget_registry,
    chat_body,
    gateway_registry,
    ledger_summary,
    reservation_tokens,
)


async def _run_batch(http: Any, server: Any, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    lines = [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
             for i, body in enumerate(bodies)]
    data = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
    uploaded = await http.post(server.base_url + "/v1/files", files={"file": ("in.jsonl", data)},
                               data={"purpose": "batch"}, headers=AUTH)
    assert uploaded.status_code == 200, uploaded.text
    created = await http.post(server.base_url + "/v1/batches", headers=AUTH, json={
        "input_file_id": uploaded.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    assert created.status_code == 200, created.text

    async def ended() -> dict[str, Any] | None:
        batch = (await http.get(server.base_url + f"/v1/batches/{created.json()['id']}", headers=AUTH)).json()
        return batch if batch["status"] in ("completed", "failed", "expired", "cancelled") else None

    return dict(await until(ended, within=60, what="the batch ended"))


async def _lines(http: Any, server: Any, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await http.get(server.base_url + f"/v1/files/{file_id}/content", headers=AUTH)
    return [json.loads(line) for line in content.text.splitlines()]


async def test_a_batch_never_overspends_a_strict_budget_and_the_lines_past_it_are_budget_exhausted(
        fake, hearth_server, http, database_url):
    limit = 5 * reservation_tokens()
    server = hearth_server(budget_registry(fake, limit, unit="tokens"), database_url=database_url)

    batch = await _run_batch(http, server, [chat_body(max_tokens=MAX_TOKENS) for _ in range(12)])

    assert batch["status"] == "completed"
    counts = batch["request_counts"]
    assert counts["total"] == 12 and counts["completed"] + counts["failed"] == 12
    assert 5 <= counts["completed"] < 12 and fake.stats.requests == counts["completed"]
    errors = await _lines(http, server, batch["error_file_id"])
    assert len(errors) == counts["failed"]
    assert {(e["response"]["status_code"], e["response"]["body"]["error"]["code"]) for e in errors} == {
        (429, "budget_exhausted")}
    # settlements are group-committed after the calls: flush them, then every call is reserved and settled once
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(server.runtime.ledger.flush(), server.loop))
    ledger = await ledger_summary(database_url)
    assert ledger["settled_calls"] == counts["completed"] == ledger["reserved_calls"] and not ledger["duplicates"]
    assert ledger["spend"] <= limit


async def test_a_caller_rate_limit_slows_a_batch_down_instead_of_failing_its_lines(fake, hearth_server, http):
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    registry["callers"][0]["limits"] = {"caller": {"concurrency": 1}}  # 8 lanes: 7 wait for the caller's slot
    fake.set_defaults(latency_ms=30)
    server = hearth_server(registry, limit_wait_s=0.05)

    batch = await _run_batch(http, server, [chat_body(f"q{i}") for i in range(6)])

    assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 6, batch
    assert fake.stats.max_in_flight == 1 and fake.stats.requests == 6
