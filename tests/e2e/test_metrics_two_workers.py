"""``hearth serve`` with two uvicorn worker processes: one scrape, whichever worker answers it, counts the
calls both workers served (prometheus-client's multiprocess mode in ``metrics_dir``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import processes
from tests.support import AUTH, MASTER_KEY, chat_body, gateway_registry, write_config


def _served(text: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == "hearth_gateway_requests":
            return sum(s.value for s in family.samples if s.name == "hearth_gateway_requests_total"
                       and s.labels == {"route": "chat", "model": "m", "status_class": "2xx"})
    return 0.0


def _counter_pids(directory: Path) -> set[str]:
    return {p.stem.rsplit("_", 1)[-1] for p in directory.glob("counter_*.db")}


async def test_both_workers_counters_appear_in_one_scrape(tmp_path: Path, postgres_url: str, redis_prefix: str,
                                                          fake: Any) -> None:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    config = write_config(tmp_path / "hearth.yaml", registry)
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_999999.db").write_bytes(b"left by an earlier run")  # emptied at start
    env = {"HEARTH_CONFIG": config, "HEARTH_DATABASE_URL": postgres_url, "HEARTH_STATE_BACKEND": "redis",
           "HEARTH_REDIS_PREFIX": redis_prefix, "HEARTH_MASTER_KEY": MASTER_KEY, "HEARTH_LOG_LEVEL": "warning",
           "HEARTH_WORKERS": "2", "HEARTH_METRICS_DIR": metrics_dir, "HEARTH_EMBEDDED_WORKER": "false"}
    server = processes.HearthProcess(tmp_path, {k: str(v) for k, v in env.items()}, tmp_path / "workers.log")
    try:
        server.wait_ready(timeout=90)  # two interpreters start (on a loaded machine this takes a while)
        assert "999999" not in _counter_pids(metrics_dir)
        sent = 0
        # New connections, many at once, until the kernel has handed some to each worker (each worker's first
        # counted call creates its counter file); bounded, so a single-worker server fails rather than loops.
        for _ in range(20):
            async with httpx.AsyncClient(timeout=30) as client:
                replies = await asyncio.gather(*[
                    client.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
                    for _ in range(20)])
            assert all(r.status_code == 200 for r in replies)
            sent += len(replies)
            if len(_counter_pids(metrics_dir)) == 2:
                break
        assert len(_counter_pids(metrics_dir)) == 2, "both workers served calls"
        assert fake.stats.requests == sent
        # Each worker moves its counts into its file every second: within a few seconds a scrape, whichever
        # worker answers it (fresh connections), counts every call both served — never more.
        deadline = time.monotonic() + 15
        seen: list[float] = []
        while time.monotonic() < deadline:
            async with httpx.AsyncClient(timeout=10) as client:
                scrape = await client.get(server.base_url + "/metrics")
            assert scrape.status_code == 200
            seen.append(_served(scrape.text))
            assert seen[-1] <= sent
            if seen[-6:] == [sent] * 6:
                break
            await asyncio.sleep(0.2)
        assert seen[-6:] == [sent] * 6, seen
        families = {f.name: f for f in text_string_to_metric_families(scrape.text)}
        expected = {"hearth_gateway_requests": "counter", "hearth_gateway_request_duration_seconds": "histogram",
                    "hearth_gateway_in_flight": "gauge", "hearth_writer_backlog": "gauge",
                    "hearth_database_up": "gauge", "hearth_state_backend_up": "gauge", "hearth_endpoint_usage": "gauge"}
        assert {name: families[name].type for name in expected} == expected
        assert [s.value for s in families["hearth_database_up"].samples] == [1.0]  # PostgreSQL
        assert [s.value for s in families["hearth_state_backend_up"].samples] == [1.0]  # Redis
        assert not any("pid" in s.labels for f in families.values() for s in f.samples)  # no per-worker series
    finally:
        server.stop()
