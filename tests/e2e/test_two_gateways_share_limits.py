"""Two gateway processes on one PostgreSQL database and one Redis: limits hold across both."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import processes
from tests.support import AUTH, MASTER_KEY, chat_body, gateway_registry, write_config


@pytest.fixture
def two_gateways(tmp_path: Path, postgres_url: str, redis_prefix: str, fake: Any) -> Any:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up", "api_key": "sk-shared-key-abcdef", "max_concurrency": 5}])
    config = write_config(tmp_path / "hearth.yaml", registry)
    env = {"HEARTH_CONFIG": config, "HEARTH_DATABASE_URL": postgres_url, "HEARTH_STATE_BACKEND": "redis",
           "HEARTH_REDIS_PREFIX": redis_prefix, "HEARTH_MASTER_KEY": MASTER_KEY, "HEARTH_LOG_LEVEL": "warning"}
    started = []
    try:
        for i in range(2):
            started.append(processes.start(tmp_path, env, name=f"gw{i}"))
        yield started
    finally:
        for p in started:
            p.stop()


async def test_endpoint_concurrency_holds_across_two_processes_sharing_redis(two_gateways, fake, http):
    fake.set_defaults(latency_ms=20)
    urls = [g.base_url for g in two_gateways]
    results = await asyncio.gather(*[
        http.post(urls[i % 2] + "/v1/chat/completions", json=chat_body(), headers=AUTH) for i in range(200)])
    assert [r.status_code for r in results].count(200) == 200
    assert fake.stats.requests == 200
    assert fake.stats.max_in_flight == 5


def test_memory_state_with_a_second_process_on_the_same_database_is_refused(tmp_path: Path, fake: Any):
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    config = write_config(tmp_path / "hearth.yaml", registry)
    env = {"HEARTH_CONFIG": config, "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/shared.db",
           "HEARTH_MASTER_KEY": MASTER_KEY}
    first = processes.start(tmp_path, env, name="first")
    try:
        second = processes.HearthProcess(tmp_path, {k: str(v) for k, v in env.items()}, tmp_path / "second.log")
        try:
            assert second.proc.wait(20) != 0
            assert "HEARTH_STATE_BACKEND=redis" in second.output()
        finally:
            second.stop()
    finally:
        first.stop()
