"""Acceptance of issue 11: a workflow run survives ``kill -9`` of its worker and never re-runs a finished step.

Real processes: an API process (``hearth serve``, no embedded worker) and a ``hearth worker`` process on one
database (PostgreSQL, and one SQLite file), the fake upstream in a thread counting every model call, Redis as
the shared state backend. The workflow has six ``summarize_async`` steps — each one model call through the
gateway — with a parallel branch and an AND join::

    s1 ──► s2 ──┐
      └──► s3 ──┴─(all)─► s4 ──► s5 ──► s6

The fake answers the first three calls and holds the fourth (step 4's) open, so step 4 is observably in
flight — its task ``running``, its request open at the fake — when the worker is killed with SIGKILL. A new
worker takes step 4's task once its lease expires; the run then completes. The fake's counter proves steps
1–3 were not run again: 3 calls, step 4's lost one, its retry, steps 5 and 6 — 7 in all (10 had any
checkpoint been ignored), and the checkpoints of steps 1–3 are the rows written before the kill.

Run: ``.venv/bin/pytest -q tests/e2e/test_workflow_kill.py -s`` (``-s`` shows timings).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from hearth.testing.fake_upstream import FakeUpstream
from tests.e2e import processes
from tests.e2e.task_runs import until
from tests.e2e.worker_process import Workers, worker_env
from tests.support import ADMIN, AUTH, gateway_registry, write_config

QUEUE = "ai.summary"  # summarize_async's queue
FAST_LEASES = {"HEARTH_TASK_LEASE_S": 3, "HEARTH_TASK_HEARTBEAT_S": 1, "HEARTH_TASK_REAP_S": 0.2,
               "HEARTH_TASK_POLL_S": 0.2, "HEARTH_SCHEDULER_INTERVAL_S": 0.2, "HEARTH_OFFLINE_FALLBACK": "false",
               "HEARTH_ADMIN_TOKEN": "admin-token-xyz"}


def _summarize(step: str, text: str, *needs: str, **extra: Any) -> dict[str, Any]:
    """A step calling the model once; its text names the step, so the fake's last request body says whose it is."""
    return {"id": step, "kind": "task", "task_type": "summarize_async", "needs": list(needs),
            "input": {"model": "m", "text": f"step {step}: {text}"}, **extra}


SIX_STEPS = {"name": "six-steps", "steps": [
    _summarize("s1", "${ $.input.text }"),
    _summarize("s2", "${ $.steps.s1.output.summary }", "s1"),
    _summarize("s3", "${ $.steps.s1.output.summary }", "s1"),
    _summarize("s4", "${ $.steps.s2.output.summary } / ${ $.steps.s3.output.summary }", "s2", "s3", join="all"),
    _summarize("s5", "${ $.steps.s4.output.summary }", "s4"),
    _summarize("s6", "${ $.steps.s5.output.summary }", "s5"),
]}


def _steps(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["step_id"]: s for s in run["steps"]}


async def test_kill9_of_the_worker_during_step_4_reuses_the_checkpoints_of_steps_1_to_3_and_completes(
        tmp_path: Path, database_url: str, redis_prefix: str, fake: FakeUpstream) -> None:
    config = write_config(tmp_path / "hearth.yaml", gateway_registry([
        {"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up"}]))
    env = worker_env(queue=QUEUE, concurrency=4, database_url=database_url, redis_prefix=redis_prefix,
                     HEARTH_CONFIG=config, **FAST_LEASES)
    fake.script({}, {}, {}, {"hang": True})  # steps 1–3 answered, step 4's call held open
    api = processes.start(tmp_path, {**env, "HEARTH_EMBEDDED_WORKER": "false"}, name="api")
    try:
        with Workers(tmp_path, env, queue=QUEUE, concurrency=4) as workers:
            doomed = workers.start("doomed")
            async with httpx.AsyncClient(base_url=api.base_url, headers=ADMIN, timeout=10) as client:
                reply = await client.post("/api/v1/workflows", json=SIX_STEPS)
                assert reply.status_code == 201, reply.text
                reply = await client.post("/api/v1/workflows/six-steps/runs",
                                          json={"caller": "tester", "input": {"text": "Hearth runs workflows."}})
                assert reply.status_code == 201, reply.text
                run_id = reply.json()["data"]["id"]

                async def read_run() -> dict[str, Any]:
                    got = await client.get(f"/api/v1/workflows/runs/{run_id}")
                    assert got.status_code == 200, got.text
                    data: dict[str, Any] = got.json()["data"]
                    return data

                async def step_4_in_flight() -> dict[str, Any] | None:
                    run = await read_run()
                    steps = _steps(run)
                    stats = fake.stats
                    if steps["s4"]["state"] == "running" and stats.requests == 4 and stats.in_flight == 1:
                        return run
                    return None

                before = await until(step_4_in_flight, within=20, every=0.05, what="step 4's model call in flight")
                task_4 = (await client.get(f"/api/v1/ai/tasks/{_steps(before)['s4']['task_id']}",
                                           headers=AUTH)).json()["data"]
                assert task_4["state"] == "running" and task_4["attempt"] == 1, task_4
                assert "step s4:" in str(fake.stats.last_body["messages"])
                killed = time.monotonic()
                doomed.kill9()

                async def call_dropped() -> bool:
                    return fake.stats.in_flight == 0

                await until(call_dropped, within=5, what="the killed call's connection closed at the fake")
                successor = workers.start("successor")

                async def finished() -> dict[str, Any] | None:
                    run = await read_run()
                    return run if run["state"] != "running" else None

                after = await until(finished, within=40, every=0.1, what="the run ended after the kill")
                elapsed = time.monotonic() - killed
                task_4 = (await client.get(f"/api/v1/ai/tasks/{_steps(after)['s4']['task_id']}",
                                           headers=AUTH)).json()["data"]
                stats = fake.stats
            assert successor.alive()
    finally:
        api.stop()
    print(f"\n[workflow kill -9] kill_to_run_done_s={elapsed:.2f} upstream_calls={stats.requests}")

    assert after["state"] == "succeeded", after
    assert {s["step_id"]: s["state"] for s in after["steps"]} == {f"s{i}": "succeeded" for i in range(1, 7)}
    # 3 calls before the kill, step 4's lost one and its retry, steps 5 and 6: nothing of steps 1–3 ran again.
    assert stats.requests == 7, stats
    assert stats.disconnects == 1
    for step in ("s1", "s2", "s3"):  # the checkpoints written before the kill are the ones the run kept
        assert _steps(after)[step] == _steps(before)[step]
    assert task_4["state"] == "succeeded" and task_4["attempt"] == 2, task_4
    assert _steps(after)["s6"]["output"]["summary"]
