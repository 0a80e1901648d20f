"""Two Hearth processes on one PostgreSQL database and one Redis: a prompt activated through one is what the
other serves on its next catalog refresh (``HEARTH_PROMPT_REFRESH_S``, 0.5 s by default: within a second),
never a mix of the two versions afterwards; and a chat ``request_id`` sent to both reaches the upstream once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from hearth.wire.sse import SSEParser
from tests.e2e import processes
from tests.support import ADMIN, AUTH, MASTER_KEY, gateway_registry, write_config


@pytest.fixture
def two_processes(tmp_path: Path, postgres_url: str, redis_prefix: str, fake: Any) -> Any:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up", "api_key": "sk-shared-key-abcdef"}])
    config = write_config(tmp_path / "hearth.yaml", registry)
    env = {"HEARTH_CONFIG": config, "HEARTH_DATABASE_URL": postgres_url, "HEARTH_STATE_BACKEND": "redis",
           "HEARTH_REDIS_PREFIX": redis_prefix, "HEARTH_MASTER_KEY": MASTER_KEY, "HEARTH_LOG_LEVEL": "warning",
           "HEARTH_ADMIN_TOKEN": "admin-token-xyz"}
    started = []
    try:
        for i in range(2):
            started.append(processes.start(tmp_path, env, name=f"p{i}"))
        yield started
    finally:
        for p in started:
            p.stop()


async def _version_served(http: Any, base_url: str) -> int:
    r = await http.post(base_url + "/api/v1/ai/summarize", headers=AUTH, json={"text": "x", "model": "m"})
    assert r.status_code == 200, r.text
    return int(r.json()["data"]["prompt_version"])


async def _until_served(http: Any, base_url: str, version: int, timeout_s: float = 5.0) -> float:
    """Seconds until ``base_url`` serves ``version`` (polling every 50 ms); fails after ``timeout_s``."""
    started = time.monotonic()
    while await _version_served(http, base_url) != version:
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{base_url} never served version {version}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_an_activation_in_one_process_is_served_by_the_other_within_a_second(two_processes, http):
    first, second = two_processes
    for text in ("v1: {{ text }}", "v2: {{ text }}"):
        r = await http.post(first.base_url + "/api/v1/prompts", headers=ADMIN,
                            json={"code": "summary", "contents": {"en": text}})
        assert r.status_code == 201, r.text
    assert await _until_served(http, second.base_url, 1) < 5  # version 1 (the active one) reached it too
    activated = await http.patch(first.base_url + "/api/v1/prompts/summary/versions/2", headers=ADMIN,
                                 json={"status": "active", "operator": "ops", "reason": "e2e"})
    assert activated.status_code == 200, activated.text
    assert await _version_served(http, first.base_url) == 2  # the changing process: at once
    # HEARTH_PROMPT_REFRESH_S (0.5 s) plus one poll and one request: within the second the issue asks for.
    assert await _until_served(http, second.base_url, 2) < 1.0
    assert {await _version_served(http, second.base_url) for _ in range(20)} == {2}  # and stays there


def _events(text: str) -> list[tuple[str | None, str | None, bytes]]:
    """(id, event, data) of every event but heartbeats."""
    return [(e.id, e.event, e.data) for e in SSEParser().feed(text.encode()) if e.event != "heartbeat"]


async def test_a_chat_request_id_sent_to_both_processes_reaches_the_upstream_once(two_processes, http, fake):
    first, second = two_processes
    fake.set_defaults(chunks=5, chunk_delay_ms=100)
    body = {"model": "m", "request_id": "e2e-dup-1", "messages": [{"role": "user", "content": "hi"}]}

    async def ask(base_url: str, stream: bool) -> Any:
        return await http.post(base_url + "/api/v1/ai/chat", headers={**AUTH, "X-Hearth-User": "u1"},
                               json={**body, "stream": stream})

    running = asyncio.create_task(ask(first.base_url, True))
    for _ in range(500):
        if fake.stats.in_flight >= 1:
            break
        await asyncio.sleep(0.01)
    duplicate = await ask(second.base_url, True)  # waits for the first process's run, then replays it
    original = await running
    assert original.status_code == duplicate.status_code == 200
    assert _events(duplicate.text) == _events(original.text)
    assert [e[1] for e in _events(original.text)][-1] == "done"
    replay = await ask(second.base_url, False)
    assert replay.status_code == 200 and replay.json()["data"]["replayed"] is True
    assert fake.stats.requests == 1
