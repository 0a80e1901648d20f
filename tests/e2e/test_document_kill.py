"""Acceptance of issue 12: a document job survives ``kill -9`` of its worker during ``running_llm`` and resumes
from its checkpoints.

Real processes: an API process (``hearth serve``, no embedded worker) and a ``hearth worker`` process serving
both pipeline queues (``documents.cpu`` and ``ai.default``) on one database (PostgreSQL, and one SQLite file),
Redis as the shared state backend, the fake upstream in a thread. The fake holds the first extraction call open,
so the model stage is observably in flight when the worker is killed with SIGKILL; a new worker takes the lost
chunk's task once its lease expires and the job completes. Parsing is not run again: its task kept attempt 1
and the stages before ``running_llm`` keep the checkpoints written before the kill.

Run: ``.venv/bin/pytest -q tests/e2e/test_document_kill.py -s`` (``-s`` shows timings).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from hearth.testing.fake_upstream import FakeUpstream
from tests.documents import pdf_factory
from tests.e2e import processes
from tests.e2e.task_runs import until
from tests.e2e.worker_process import Workers, worker_env
from tests.support import ADMIN, AUTH, gateway_registry, write_config

QUEUES = "documents.cpu,ai.default"
FAST_LEASES = {"HEARTH_TASK_LEASE_S": 3, "HEARTH_TASK_HEARTBEAT_S": 1, "HEARTH_TASK_REAP_S": 0.2,
               "HEARTH_TASK_POLL_S": 0.2, "HEARTH_SCHEDULER_INTERVAL_S": 0.2, "HEARTH_OFFLINE_FALLBACK": "false",
               "HEARTH_ADMIN_TOKEN": "admin-token-xyz", "HEARTH_TASK_QUEUES": "documents.cpu=2,ai.default=4"}
EARLY = ("parsing_pdf", "extracting_tables", "chunking_document")


async def test_kill9_of_the_worker_during_running_llm_resumes_from_the_checkpoints_and_completes(
        tmp_path: Path, database_url: str, redis_prefix: str, fake: FakeUpstream) -> None:
    config = write_config(tmp_path / "hearth.yaml", gateway_registry([
        {"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up"}]))
    env = worker_env(queue=QUEUES, concurrency=4, database_url=database_url, redis_prefix=redis_prefix,
                     HEARTH_CONFIG=config, **FAST_LEASES)
    fake.set_defaults(content=json.dumps(pdf_factory.financial_result()))
    fake.script({"hang": True})  # the first chunk's extraction is held open
    api = processes.start(tmp_path, {**env, "HEARTH_EMBEDDED_WORKER": "false"}, name="api")
    try:
        with Workers(tmp_path, env, queue=QUEUES, concurrency=4) as workers:
            doomed = workers.start("doomed")
            async with httpx.AsyncClient(base_url=api.base_url, headers=AUTH, timeout=10) as client:
                created = await client.post("/api/v1/documents", files={
                    "file": ("report.pdf", pdf_factory.financial_report(), "application/pdf")})
                assert created.status_code == 201, created.text
                doc = created.json()["data"]["id"]
                started = await client.post(f"/api/v1/documents/{doc}/job", json={"model": "m"})
                assert started.status_code == 202, started.text
                run_id = started.json()["data"]["run_id"]

                async def read_run() -> dict[str, Any]:
                    got = await client.get(f"/api/v1/workflows/runs/{run_id}", headers=ADMIN)
                    assert got.status_code == 200, got.text
                    return {s["step_id"]: s for s in got.json()["data"]["steps"]}

                async def model_in_flight() -> dict[str, Any] | None:
                    steps = await read_run()
                    if steps["running_llm"]["state"] == "running" and fake.stats.in_flight == 1:
                        return steps
                    return None

                before = await until(model_in_flight, within=30, every=0.05, what="an extraction call in flight")
                killed = time.monotonic()
                doomed.kill9()
                successor = workers.start("successor")

                async def job_ended() -> dict[str, Any] | None:
                    job = (await client.get(f"/api/v1/documents/{doc}/job")).json()["data"]
                    return job if job["state"] in ("completed", "failed") else None

                job = await until(job_ended, within=60, every=0.1, what="the job ended after the kill")
                elapsed = time.monotonic() - killed
                after = await read_run()
                parse = (await client.get(f"/api/v1/ai/tasks/{after['parsing_pdf']['task_id']}")).json()["data"]
                chunk_tasks = [(await client.get(f"/api/v1/ai/tasks/{t}")).json()["data"]
                               for t in after["running_llm"]["detail"]["tasks"]]
            assert successor.alive()
    finally:
        api.stop()
    print(f"\n[document kill -9] kill_to_job_done_s={elapsed:.2f} upstream_calls={fake.stats.requests}")

    assert job["state"] == "completed", job
    assert job["result"] == pdf_factory.financial_result()
    for stage in EARLY:  # the checkpoints written before the kill are the ones the job kept
        assert after[stage] == before[stage], stage
    assert parse["state"] == "succeeded" and parse["attempt"] == 1  # parsed once, before the kill
    assert max(t["attempt"] for t in chunk_tasks) == 2  # the lost chunk's call ran again, once
    assert all(t["state"] == "succeeded" for t in chunk_tasks)
