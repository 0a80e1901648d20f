"""/readyz tells the truth: a database outage degrades (strict budgets refused, others served) but never
takes the replica out; a state backend that does not answer does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.store.tcp_proxy import TcpProxy
from tests.support import ADMIN, AUTH, chat_body, gateway_registry

FREE = {"Authorization": "Bearer free-key-456"}


def _registry(fake: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up", "max_concurrency": 100}])
    reg["callers"].append({"name": "free", "key": "free-key-456"})
    reg["budgets"] = [{"name": "daily", "caller": "tester", "scope": "caller", "period": "day", "unit": "tokens",
                       "limit": 1_000_000}]
    return reg


@pytest.fixture
def pg_port_and_url(postgres_url: str) -> Iterator[tuple[int, str]]:
    host_port = postgres_url.split("@", 1)[1].split("/", 1)[0]
    yield int(host_port.rsplit(":", 1)[1]), postgres_url


async def test_a_database_outage_degrades_but_does_not_unready(fake, hearth_server, http, pg_port_and_url):
    port, url = pg_port_and_url
    proxy = await TcpProxy(port).up()
    try:
        via_proxy = url.replace(f":{port}/", f":{proxy.port}/")
        # started from a thread: the proxy it migrates through runs on this test's event loop
        server = await asyncio.to_thread(hearth_server, _registry(fake), database_url=via_proxy,
                                         ledger_commit_timeout_s=2.0)
        base = server.base_url
        ready = await http.get(base + "/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready", ready.text

        await proxy.down()
        budgeted = await http.post(base + "/v1/chat/completions", json=chat_body(), headers=AUTH)
        assert budgeted.status_code == 503 and budgeted.json()["error"]["code"] == "budget_ledger_unavailable"
        assert "retry-after" in budgeted.headers
        free = await http.post(base + "/v1/chat/completions", json=chat_body(), headers=FREE)
        assert free.status_code == 200  # a caller without budgets is served through the outage
        report = await http.get(base + "/readyz")
        assert report.status_code == 200, report.text  # degraded, not taken out of rotation
        body = report.json()
        assert body["status"] == "degraded" and body["budgeted_calls"] == "refused"
        assert body["checks"]["database"].startswith("error") and body["checks"]["state_backend"] == "ok"
        assert fake.stats.requests == 1  # the refused budgeted call never reached the upstream

        await proxy.up()
        again = await http.post(base + "/v1/chat/completions", json=chat_body(), headers=AUTH)
        assert again.status_code == 200, again.text
        report = await http.get(base + "/readyz")
        assert report.json()["status"] == "ready" and report.json()["budgeted_calls"] == "admitted"
        stats = (await http.get(base + "/api/v1/admin/stats", headers=ADMIN)).json()["data"]
        assert stats["budget_ledger"]["reservations_failed"] >= 1 and stats["budget_ledger"]["database_ok"]
        # stopped while its database is reachable: the proxy lives on this test's event loop, which is gone by
        # the fixture's teardown, and a stop against an unreachable database waited out one timeout after another
        await asyncio.to_thread(server.stop)
    finally:
        await proxy.down()


async def test_a_state_backend_that_does_not_answer_is_not_ready(fake, hearth_server, http):
    server = hearth_server(_registry(fake), state_backend="redis", redis_url="redis://127.0.0.1:9/0",
                           redis_prefix="hearth-test-unready:")
    report = await http.get(server.base_url + "/readyz")
    assert report.status_code == 503 and report.json()["status"] == "not_ready"
    assert report.json()["checks"]["state_backend"].startswith("error")
    assert "retry-after" in report.headers
