"""A task whose model call meets a dead state backend is retried until Redis is back, never failed.

Hearth fails closed on a control-plane fault (admission answers ``state_backend_unavailable``); a task
takes that as "retry later" without spending its attempts, so an outage longer than any retry budget
still ends in one successful call. A private redis-server is stopped and started; the machine's shared
one is never touched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.redis_server import RedisServer
from tests.support import AUTH, gateway_registry
from tests.tasks.api_helpers import TASKS, finished

SCHEMA = {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


async def test_redis_down_retries_the_task_until_redis_returns(postgres_url: str, fake: Any, hearth_server: Any,
                                                               redis_server: RedisServer, http: Any) -> None:
    fake.set_defaults(content='{"order": 42}')
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up"}])
    server = hearth_server(reg, database_url=postgres_url, state_backend="redis", redis_url=redis_server.url,
                           redis_prefix="hearth-task-redis:", task_poll_s=0.1, task_reap_s=0.2, state_timeout_s=0.5)
    redis_server.stop()
    r = await http.post(server.base_url + TASKS, headers=AUTH, json={
        "task_type": "extract_async", "payload": {"text": "Order 42 shipped.", "schema": SCHEMA, "model": "m"}})
    assert r.status_code == 202, r.text
    task_id = r.json()["data"]["task_id"]
    loop = asyncio.get_running_loop()
    until = loop.time() + 20
    while True:  # wait for at least two refused attempts: more than one retry, and still not failed
        task = (await http.get(f"{server.base_url}{TASKS}/{task_id}", headers=AUTH)).json()["data"]
        retries = [a for a in task["attempts"] if a["error_code"] == "state_backend_unavailable"]
        assert task["state"] in ("queued", "running"), task
        if len(retries) >= 3:
            break
        assert loop.time() < until, task
        await asyncio.sleep(0.1)
    assert fake.stats.requests == 0
    await asyncio.to_thread(redis_server.start)
    done = await finished(http, server, task_id, within_s=30)
    assert done["state"] == "succeeded", done
    refused = [a for a in done["attempts"] if a["error_code"] == "state_backend_unavailable"]
    assert len(refused) >= 3 and done["attempt"] == len(refused) + 1
    assert done["max_attempts"] == 3 + len(refused)  # the outage's attempts were not counted against the task
    assert all(a["outcome"] == "retry" for a in done["attempts"][:-1])
    assert done["attempts"][-1]["outcome"] == "succeeded"
    result = (await http.get(f"{server.base_url}{TASKS}/{task_id}/result", headers=AUTH)).json()["data"]["result"]
    assert result["data"] == {"order": 42}
    assert fake.stats.requests == 1
