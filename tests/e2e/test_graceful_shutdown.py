"""Graceful shutdown (issue 13, item 7; seed 002 §6.8): SIGTERM to a real ``hearth serve`` process.

The process serves 20 streams from a fake upstream that streams slowly (half of them short enough to
finish within the stream grace, half far longer) and runs 20 tasks (half short, half far longer than
the task grace), with a client following a task's events. After SIGTERM:

* every stream either finished (``[DONE]``) or ended with an explicit ``service_shutting_down`` error
  event — never a silent truncation; the follower stream ended at once with its own explicit event;
* every task either finished or was handed back (``queued`` again, its attempt given back);
* every call has its request-log row and its budget settlement in the database;
* the process exited within its bound.

The in-process tests below check the pieces one at a time: ``/readyz`` turns 503 the moment shutdown
begins, and a stream ended by the shutdown is logged as such.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from sqlalchemy import select

from hearth.shutdown import EXIT_TIMED_OUT
from hearth.store.db import create_engine
from hearth.store.tables import request_logs, task_attempts, tasks
from hearth.testing.fake_upstream import reply_text
from hearth.wire.sse import SSEParser
from tests.e2e import processes
from tests.e2e.worker_process import worker_env
from tests.support import (
    ADMIN,
    AUTH,
    budget_registry,
    chat_body,
    gateway_registry,
    ledger_summary,
    write_config,
)

STREAMS = 20
TASKS = 20
CHUNK_MS = 50
SHORT_CHUNKS = 50  # 2.5 s: finishes within the stream grace
LONG_CHUNKS = 400  # 20 s: still streaming when the grace is over
STREAM_GRACE_S = 5.0
TASK_GRACE_S = 6.0
BOUND_S = 20.0
SHORT_TASK_MS = 3000
LONG_TASK_MS = 120_000
QUEUE = "ai.default"


async def _stream(session: aiohttp.ClientSession, url: str, max_tokens: int, first: asyncio.Event,
                  seen: list[int]) -> bytes:
    """The whole body of one streamed call; ``first`` is set once its first event arrived."""
    body = chat_body(max_tokens=max_tokens, stream=True)
    async with session.post(url + "/v1/chat/completions", json=body, headers=AUTH) as r:
        assert r.status == 200, await r.text()
        data = b""
        async for chunk in r.content.iter_any():
            if not data:
                seen.append(1)
                if len(seen) == STREAMS:
                    first.set()
            data += chunk
        return data


async def _follow(session: aiohttp.ClientSession, url: str, task_id: str, opened: asyncio.Event) -> bytes:
    async with session.get(f"{url}/api/v1/ai/tasks/{task_id}/events", headers=AUTH) as r:
        assert r.status == 200
        data = b""
        async for chunk in r.content.iter_any():
            data += chunk
            opened.set()
        return data


def _events(body: bytes) -> list[bytes]:
    return [line[len(b"data: "):] for line in body.split(b"\n") if line.startswith(b"data: ")]


def _text(body: bytes) -> str:
    out = []
    for data in _events(body):
        if data == b"[DONE]":
            continue
        for choice in orjson.loads(data).get("choices") or []:
            out.append(choice.get("delta", {}).get("content") or "")
    return "".join(out)


async def _running_tasks(http: Any, url: str) -> int:
    r = await http.get(url + "/api/v1/ai/tasks", params={"state": "running", "limit": 100}, headers=ADMIN)
    assert r.status_code == 200, r.text
    return len(r.json()["data"]["tasks"])


async def test_sigterm_during_20_streams_and_20_tasks_loses_nothing(
        tmp_path: Path, postgres_url: str, redis_prefix: str, fake: Any, http: Any) -> None:
    config = write_config(tmp_path / "hearth.yaml", budget_registry(fake, 1_000_000.0))
    env = worker_env(queue=QUEUE, concurrency=TASKS, database_url=postgres_url, redis_prefix=redis_prefix,
                     HEARTH_CONFIG=config, HEARTH_ADMIN_TOKEN="admin-token-xyz", HEARTH_LOG_LEVEL="info",
                     HEARTH_SHUTDOWN_STREAM_GRACE_S=STREAM_GRACE_S, HEARTH_TASK_GRACE_S=TASK_GRACE_S,
                     HEARTH_SHUTDOWN_TIMEOUT_S=BOUND_S, HEARTH_TASK_POLL_S=0.1)
    fake.set_defaults(chunks=LONG_CHUNKS, chunk_delay_ms=CHUNK_MS)
    server = processes.HearthProcess(tmp_path, {k: str(v) for k, v in env.items()}, tmp_path / "serve.log")
    try:
        server.wait_ready(timeout=60)  # a loaded shared machine can take long to start a process
        batch = [{"task_type": "test.sleep", "payload": {"ms": SHORT_TASK_MS if i % 2 == 0 else LONG_TASK_MS}}
                 for i in range(TASKS)]
        r = await http.post(server.base_url + "/api/v1/ai/tasks/batch", json={"tasks": batch}, headers=AUTH)
        assert r.status_code == 202, r.text
        task_ids = [t["task_id"] for t in r.json()["data"]["tasks"]]
        deadline = time.monotonic() + 10
        while await _running_tasks(http, server.base_url) < TASKS:
            assert time.monotonic() < deadline, "the tasks never all ran"
            await asyncio.sleep(0.05)

        first = asyncio.Event()
        opened = asyncio.Event()
        seen: list[int] = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            streams = [asyncio.create_task(_stream(session, server.base_url,
                                                   SHORT_CHUNKS if i % 2 == 0 else LONG_CHUNKS, first, seen))
                       for i in range(STREAMS)]
            follower = asyncio.create_task(_follow(session, server.base_url, task_ids[1], opened))
            await asyncio.wait_for(first.wait(), 10)
            await asyncio.wait_for(opened.wait(), 10)

            signalled = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            followed = await asyncio.wait_for(follower, STREAM_GRACE_S)
            followed_within = time.monotonic() - signalled
            bodies = await asyncio.wait_for(asyncio.gather(*streams), BOUND_S)
        code = await asyncio.to_thread(server.proc.wait, BOUND_S + 5)
        exited_within = time.monotonic() - signalled
    finally:
        server.stop()
    log = server.output()

    # the process exited within its bound, by the graceful path (not the watchdog)
    assert code != EXIT_TIMED_OUT and code in (0, -signal.SIGTERM), (code, log[-3000:])
    assert STREAM_GRACE_S - 0.5 < exited_within < BOUND_S, exited_within
    assert "shutdown_begun" in log and "shutdown_finished" in log

    # streams: finished, or ended with an explicit error event
    assert followed_within < STREAM_GRACE_S - 1  # at once, not when the grace is over
    assert b'"code":"service_shutting_down"' in followed and followed.startswith(b"id: ")
    finished = ended = 0
    for i, body in enumerate(bodies):
        events = _events(body)
        assert events, body
        if events[-1] == b"[DONE]":
            finished += 1
            assert i % 2 == 0 and _text(body) == reply_text(SHORT_CHUNKS)
        else:
            ended += 1
            last = orjson.loads(events[-1])
            assert last["error"]["code"] == "service_shutting_down", body[-500:]
            assert i % 2 == 1 and 0 < len(_text(body)) < len(reply_text(LONG_CHUNKS))
    assert (finished, ended) == (STREAMS // 2, STREAMS // 2)

    engine = create_engine(postgres_url)
    try:
        async with engine.connect() as conn:
            logs = (await conn.execute(select(request_logs.c.status, request_logs.c.error_code,
                                              request_logs.c.completion_tokens)
                                       .where(request_logs.c.route == "chat"))).all()
            rows = {r["id"]: r for r in (await conn.execute(select(tasks).where(tasks.c.id.in_(task_ids))))
                    .mappings()}
            attempts = (await conn.execute(select(task_attempts.c.task_id, task_attempts.c.attempt,
                                                  task_attempts.c.outcome))).all()
    finally:
        await engine.dispose()

    # every call logged, as what happened to it
    assert sorted((s, c) for s, c, _ in logs) == ([(200, None)] * (STREAMS // 2)
                                                  + [(503, "service_shutting_down")] * (STREAMS // 2)), logs
    assert all(tokens > 0 for _, _, tokens in logs)
    # every budget reservation settled, once
    ledger = await ledger_summary(postgres_url)
    assert ledger["duplicates"] == [] and ledger["open"] == 0, ledger
    assert ledger["settled_calls"] == STREAMS

    # tasks: the short ones finished, the long ones were handed back with their attempt given back
    for i, task_id in enumerate(task_ids):
        row = rows[task_id]
        if i % 2 == 0:
            assert row["state"] == "succeeded", row
        else:
            assert (row["state"], row["attempt"], row["max_attempts"], row["worker"], row["lease_until"]) == (
                "queued", 1, 4, None, None), row
    outcomes = {(t, a): o for t, a, o in attempts}
    assert {outcomes[(t, 1)] for t in task_ids[1::2]} == {"handed_back"}
    assert {outcomes[(t, 1)] for t in task_ids[0::2]} == {"succeeded"}


# --------------------------------------------------------------------------- in-process pieces

def _one_endpoint(fake: Any) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up"}])


def _begin(server: Any) -> None:
    async def begin() -> None:
        server.runtime.shutdown.begin()

    server.call(begin())


async def _first_bytes_then_rest(http: Any, url: str, body: dict[str, Any], server: Any) -> bytes:
    """Stream ``body``; once its first bytes arrived, begin the server's shutdown; the whole body."""
    async with http.stream("POST", url, json=body, headers=AUTH) as r:
        assert r.status_code == 200
        chunks = r.aiter_raw()
        raw = await chunks.__anext__()
        _begin(server)
        raw += b"".join([c async for c in chunks])
    return raw


async def _log_row(http: Any, server: Any, route: str) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    while True:
        items = (await http.get(server.base_url + "/api/v1/request-logs", params={"route": route},
                                headers=ADMIN)).json()["data"]["items"]
        if items or time.monotonic() > deadline:
            assert items, f"no {route} row"
            return dict(items[0])
        await asyncio.sleep(0.05)


async def test_readyz_turns_503_the_moment_shutdown_begins(fake: Any, hearth_server: Any, http: Any) -> None:
    server = hearth_server(_one_endpoint(fake))
    assert (await http.get(server.base_url + "/readyz")).status_code == 200
    _begin(server)
    r = await http.get(server.base_url + "/readyz")
    assert r.status_code == 503 and r.json()["status"] == "shutting_down"
    assert r.headers["retry-after"] == "5"


async def test_an_openai_stream_past_the_grace_ends_with_an_error_event_and_is_logged(
        fake: Any, hearth_server: Any, http: Any) -> None:
    server = hearth_server(_one_endpoint(fake), shutdown_stream_grace_s=0.3)
    fake.set_defaults(chunks=200, chunk_delay_ms=20)
    started = time.monotonic()
    raw = await _first_bytes_then_rest(http, server.base_url + "/v1/chat/completions",
                                       chat_body(stream=True), server)
    assert time.monotonic() - started < 2.5  # not the 4 s the whole answer takes
    last = orjson.loads(_events(raw)[-1])
    assert last["error"]["code"] == "service_shutting_down" and b"[DONE]" not in raw
    row = await _log_row(http, server, "chat")
    assert (row["status"], row["error_code"]) == (503, "service_shutting_down")
    assert row["completion_tokens"] > 0


async def test_a_capability_chat_stream_past_the_grace_ends_with_its_own_error_event(
        fake: Any, hearth_server: Any, http: Any) -> None:
    server = hearth_server(_one_endpoint(fake), shutdown_stream_grace_s=0.3)
    fake.set_defaults(chunks=200, chunk_delay_ms=20)
    raw = await _first_bytes_then_rest(http, server.base_url + "/api/v1/ai/chat",
                                       {"model": "m", "stream": True,
                                        "messages": [{"role": "user", "content": "hello"}]}, server)
    events = list(SSEParser().feed(raw))
    assert events[0].event == "message" and events[-1].event == "error"
    assert orjson.loads(events[-1].data)["code"] == "service_shutting_down"
    assert events[-1].id == str(len(events))  # part of the stored run: a resumed client sees it too


async def test_a_stream_that_ends_within_the_grace_is_untouched(fake: Any, hearth_server: Any, http: Any) -> None:
    server = hearth_server(_one_endpoint(fake), shutdown_stream_grace_s=5)
    fake.set_defaults(chunks=20, chunk_delay_ms=20)
    raw = await _first_bytes_then_rest(http, server.base_url + "/v1/chat/completions",
                                       chat_body(stream=True), server)
    assert _events(raw)[-1] == b"[DONE]" and _text(raw) == reply_text(20)
