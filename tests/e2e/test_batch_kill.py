"""Acceptance of issue 14 (batches): a batch of 1,000 requests completes after ``kill -9`` of its worker in the
middle, and the output holds each custom_id exactly once.

Real processes: an API process (``hearth serve``, no embedded worker) and ``hearth worker`` processes on
``ai.default``, one database (PostgreSQL, and one SQLite file), Redis as the shared state backend, the fake
upstream in a thread (20 ms per answer, so the batch is observably in progress). The batch runs 8 lines at a
time; once at least 300 lines are answered the worker is killed with SIGKILL and a new one is started. Its
task is requeued when the lease expires and the new attempt runs only the lines without a recorded answer.

What "exactly once" means here (docs/batches.md): every line's answer is recorded once — a second record of
the same (batch, line) is refused by the primary key — and the output file is assembled from those records, so
it has each custom_id once. A call in flight at the kill whose answer was not yet recorded is sent again by the
new attempt: the upstream may see at most ``batch_concurrency`` (8) requests more than 1,000, never a line
answered twice in the output.

Run: ``.venv/bin/pytest -q tests/e2e/test_batch_kill.py -s`` (``-s`` shows timings).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from hearth.testing.fake_upstream import FakeUpstream
from tests.e2e import processes
from tests.e2e.task_runs import until
from tests.e2e.worker_process import Workers, worker_env
from tests.support import AUTH, gateway_registry, write_config

QUEUE = "ai.default"
LINES = 1000
CONCURRENCY = 8
FAST_LEASES = {"HEARTH_TASK_LEASE_S": 3, "HEARTH_TASK_HEARTBEAT_S": 1, "HEARTH_TASK_REAP_S": 0.2,
               "HEARTH_TASK_POLL_S": 0.2, "HEARTH_BATCH_CONCURRENCY": CONCURRENCY}


def _input_file() -> bytes:
    lines = [{"custom_id": f"line-{i:04d}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "m", "messages": [{"role": "user", "content": f"request {i}"}]}} for i in range(LINES)]
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


async def test_kill9_of_the_worker_mid_batch_resumes_and_answers_each_custom_id_exactly_once(
        tmp_path: Path, database_url: str, redis_prefix: str, fake: FakeUpstream) -> None:
    config = write_config(tmp_path / "hearth.yaml", gateway_registry([
        {"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up"}]))
    env = worker_env(queue=QUEUE, concurrency=4, database_url=database_url, redis_prefix=redis_prefix,
                     HEARTH_CONFIG=config, **FAST_LEASES)
    fake.set_defaults(latency_ms=20)
    api = processes.start(tmp_path, {**env, "HEARTH_EMBEDDED_WORKER": "false"}, name="api")
    try:
        with Workers(tmp_path, env, queue=QUEUE, concurrency=4) as workers:
            doomed = workers.start("doomed")
            async with httpx.AsyncClient(base_url=api.base_url + "/v1", headers=AUTH, timeout=30) as client:
                uploaded = await client.post("/files", files={"file": ("big.jsonl", _input_file())},
                                             data={"purpose": "batch"})
                assert uploaded.status_code == 200, uploaded.text
                created = await client.post("/batches", json={"input_file_id": uploaded.json()["id"],
                                                              "endpoint": "/v1/chat/completions",
                                                              "completion_window": "24h"})
                assert created.status_code == 200, created.text
                batch_id = created.json()["id"]

                async def read() -> dict[str, Any]:
                    got = await client.get(f"/batches/{batch_id}")
                    assert got.status_code == 200, got.text
                    return dict(got.json())

                async def midway() -> dict[str, Any] | None:
                    batch = await read()
                    return batch if batch["request_counts"]["completed"] >= 300 else None

                before = await until(midway, within=60, every=0.02, what="300 lines answered")
                doomed.kill9()
                killed, killed_wall = time.monotonic(), time.time()
                at_kill = (await read())["request_counts"]["completed"]
                sent_at_kill = fake.stats.requests
                successor = workers.start("successor")

                async def ended() -> dict[str, Any] | None:
                    batch = await read()
                    return batch if batch["status"] in ("completed", "failed", "expired", "cancelled") else None

                batch = await until(ended, within=120, every=0.1, what="the batch ended after the kill")
                elapsed = time.monotonic() - killed
                output = await client.get(f"/files/{batch['output_file_id']}/content")
                tasks = (await client.get(api.base_url + "/api/v1/ai/tasks", params={"task_type": "openai_batch"}))
            assert successor.alive()
    finally:
        api.stop()
    sent = fake.stats.requests
    (task,) = tasks.json()["data"]["tasks"]
    resumed_after = datetime.fromisoformat(task["timings"]["started_at"]).timestamp() - killed_wall
    print(f"\n[batch kill -9] answered_before_kill={at_kill} kill_to_resumed_s={resumed_after:.2f} "
          f"resumed_run_s={task['timings']['run_ms'] / 1000:.2f} kill_to_done_s={elapsed:.2f} upstream_requests={sent}")

    assert before["status"] == "in_progress" and at_kill < LINES  # the kill really came in the middle
    assert batch["status"] == "completed", batch
    assert batch["request_counts"] == {"total": LINES, "completed": LINES, "failed": 0}
    assert batch["error_file_id"] is None
    custom_ids = [json.loads(line)["custom_id"] for line in output.text.splitlines()]
    assert len(custom_ids) == LINES and len(set(custom_ids)) == LINES  # each answered once, none twice
    assert custom_ids == [f"line-{i:04d}" for i in range(LINES)]  # in input order
    assert all(json.loads(line)["response"]["status_code"] == 200 for line in output.text.splitlines())
    # re-sent: at most the calls in flight at the kill (their answers were never recorded)
    assert LINES <= sent <= LINES + CONCURRENCY, (sent, sent_at_kill)
    assert task["state"] == "succeeded" and task["attempt"] == 2  # one attempt killed, the next one resumed
