"""Fault and crash acceptance of the task engine, with real processes and real databases.

* a worker killed with SIGKILL while 20 tasks run: a new worker finishes every one exactly once, the
  killed attempt recorded as ``lease_expired``, within 20 s with the default lease settings;
* PostgreSQL restarted (a private instance) in the middle of a 2,000-task run on two workers: they
  reconnect on their own and every task ends exactly once;
* two workers on PostgreSQL drain 2,000 tasks: none runs twice, none is skipped, both do some of it;
* an API process (``hearth serve``, no embedded worker) and a worker process on one SQLite file:
  500 tasks submitted over HTTP all end exactly once.

Every task is ``test.record``: its handler appends ``<tag> <attempt> <pid>`` to a record file, so the
tests count real executions, and read back from the database each task's state, result, attempts and
``succeeded`` events (:mod:`tests.e2e.task_runs`).

Run: ``.venv/bin/pytest -q tests/e2e/test_task_engine_faults.py -p no:randomly -s`` (``-s`` shows timings).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import create_engine, migrate
from tests.e2e import processes
from tests.e2e.postgres_server import PostgresServer
from tests.e2e.task_runs import (
    all_ended,
    executions,
    outcome,
    read_records,
    record_body,
    record_service,
    states,
    submit_records,
    tag,
    until,
)
from tests.e2e.worker_process import Workers, worker_env
from tests.support import AUTH, gateway_registry, write_config

QUEUE = "faults"


def _report(what: str, **measured: float | int | str) -> None:
    print(f"\n[{what}] " + ", ".join(f"{k}={round(v, 2) if isinstance(v, float) else v}"
                                      for k, v in measured.items()))


def _warnings(logs: list[str]) -> Counter[str]:
    """How often each engine warning (``task_cycle_failed``, ``task_listen_lost`` …) was logged."""
    return Counter(word for log in logs for word in re.findall(r"\b(task_[a-z_]+)\b", log)
                   if word.endswith(("failed", "lost", "expired")))


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    """A fresh, migrated database on the shared PostgreSQL."""
    engine = create_engine(postgres_url)
    await migrate(engine)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def private_pg() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


# --------------------------------------------------------------------------- 1. kill -9 a worker


async def test_kill9_worker_with_20_running_tasks_a_new_worker_ends_each_exactly_once_within_20s(
        tmp_path: Path, postgres_url: str, db: AsyncEngine, redis_prefix: str) -> None:
    record = tmp_path / "record.txt"
    env = worker_env(queue=QUEUE, concurrency=32, database_url=postgres_url, redis_prefix=redis_prefix)
    with Workers(tmp_path, env, queue=QUEUE, concurrency=32) as workers:
        first = workers.start("doomed")
        ids = await submit_records(record_service(db, QUEUE), 20, record, ms=3000)

        async def all_running() -> bool:
            return (await states(db))["running"] == 20 and len(read_records(record)) == 20

        await until(all_running, within=10, what="20 tasks running on the first worker")
        killed = time.monotonic()
        first.kill9()
        second = workers.start("successor")
        ready = time.monotonic() - killed
        await until(lambda: all_ended(db, 20), within=25, every=0.1, what="every task ended after the kill")
        done = time.monotonic() - killed
        result = await outcome(db)
        runs = read_records(record)
    _report("kill -9", successor_ready_s=ready, kill_to_all_done_s=done)

    assert result.problems(ids, executions=executions(runs), attempts=2) == []
    assert sorted(runs) == sorted([(tag(i), 1, first.pid) for i in range(20)] +
                                  [(tag(i), 2, second.pid) for i in range(20)])
    for task_id in ids:
        killed_try, final = result.attempts[task_id]
        assert (killed_try["outcome"], killed_try["worker"], killed_try["error_code"]) == (
            "lease_expired", first.worker_id, "worker_lost")
        assert (final["outcome"], final["worker"]) == ("succeeded", second.worker_id)
    assert done < 20, f"all tasks ended {done:.1f} s after the kill (default lease settings)"


# --------------------------------------------------------------------------- 2. PostgreSQL restart


async def test_postgres_restart_mid_run_two_workers_reconnect_and_every_task_ends_once(
        tmp_path: Path, private_pg: PostgresServer, redis_prefix: str) -> None:
    n = 2000
    url = private_pg.create_database("hearth")
    engine = create_engine(url)
    try:
        await migrate(engine)
        record = tmp_path / "record.txt"
        env = worker_env(queue=QUEUE, concurrency=16, database_url=url, redis_prefix=redis_prefix)
        with Workers(tmp_path, env, queue=QUEUE, concurrency=16) as workers:
            pair = workers.start_many("w0", "w1")
            started = time.monotonic()
            ids = await submit_records(record_service(engine, QUEUE), n, record, ms=40)

            async def a_third_done() -> bool:
                return (await states(engine))["succeeded"] >= n // 3

            await until(a_third_done, within=30, what="a third of the run done before the restart")
            before = (await states(engine))["succeeded"]
            await engine.dispose()  # the test's own pooled connections die with the server, like the workers'
            down, up = private_pg.restart(down_s=1.0)
            up_wall = time.time()
            await until(lambda: all_ended(engine, n), within=60, every=0.2, what="every task ended after the "
                        "restart", tolerate=(OperationalError, DBAPIError, OSError))
            done = time.monotonic()
            assert all(w.alive() for w in pair), "a worker exited instead of reconnecting"
            result = await outcome(engine)
            runs = read_records(record)
            logs = [w.output() for w in pair]
    finally:
        await engine.dispose()
    _report("postgres restart", succeeded_before_restart=before, down_s=up - down,
            up_to_all_done_s=done - up, run_s=done - started,
            warnings=" ".join(f"{k}:{v}" for k, v in sorted(_warnings(logs).items())))

    assert result.problems(ids, executions=executions(runs)) == []
    # Both reconnected on their own: each finished attempts that started after the server came back.
    after = {a["worker"] for rows in result.attempts.values() for a in rows
             if a["outcome"] == "succeeded" and a["started_at"] > up_wall}
    assert after == {w.worker_id for w in pair}, logs


# --------------------------------------------------------------------------- 3. two workers drain a queue


async def test_two_workers_drain_2000_tasks_each_runs_once_and_both_share_the_work(
        tmp_path: Path, postgres_url: str, db: AsyncEngine, redis_prefix: str) -> None:
    n = 2000
    record = tmp_path / "record.txt"
    env = worker_env(queue=QUEUE, concurrency=16, database_url=postgres_url, redis_prefix=redis_prefix)
    with Workers(tmp_path, env, queue=QUEUE, concurrency=16) as workers:
        pair = workers.start_many("w0", "w1")
        started = time.monotonic()
        ids = await submit_records(record_service(db, QUEUE), n, record, ms=10)
        await until(lambda: all_ended(db, n), within=60, every=0.1, what="2,000 tasks ended")
        elapsed = time.monotonic() - started
        result = await outcome(db)
        runs = read_records(record)
    per_worker = Counter(a["worker"] for rows in result.attempts.values() for a in rows)
    _report("two workers", tasks=n, drain_s=elapsed, per_s=n / elapsed,
            **{w.name: per_worker[w.worker_id] for w in pair})

    assert result.problems(ids, attempts=1) == []
    assert sorted(t for t, _, _ in runs) == [tag(i) for i in range(n)]  # each ran once, none skipped
    assert {attempt for _, attempt, _ in runs} == {1}
    assert set(per_worker) == {w.worker_id for w in pair} and min(per_worker.values()) > 0, per_worker
    assert {pid for _, _, pid in runs} == {w.pid for w in pair}


# --------------------------------------------------------------------------- 4. API + worker on SQLite


async def test_api_process_and_worker_process_on_one_sqlite_file_drain_500_tasks(
        tmp_path: Path, redis_prefix: str) -> None:
    n = 500
    url = f"sqlite+aiosqlite:///{tmp_path}/shared.db"
    record = tmp_path / "record.txt"
    # A simulated endpoint makes the API process ready (/readyz); caller `tester` submits with its key.
    config = write_config(tmp_path / "hearth.yaml", gateway_registry([
        {"name": "sim1", "provider": "sim", "upstream_model": "simulated-chat"}]))
    env = worker_env(queue=QUEUE, concurrency=16, database_url=url, redis_prefix=redis_prefix)
    api = processes.start(tmp_path, {**env, "HEARTH_CONFIG": config, "HEARTH_EMBEDDED_WORKER": "false"}, name="api")
    engine = create_engine(url)
    try:
        with Workers(tmp_path, env, queue=QUEUE, concurrency=16) as workers:
            worker = workers.start("worker")
            started = time.monotonic()
            ids: list[str] = []
            async with httpx.AsyncClient(base_url=api.base_url, timeout=30,
                                         headers=AUTH) as client:
                for first in range(0, n, 100):
                    reply = await client.post("/api/v1/ai/tasks/batch", json={"tasks": [
                        record_body(i, record, 5) for i in range(first, first + 100)]})
                    assert reply.status_code == 202, reply.text
                    accepted = reply.json()["data"]["tasks"]
                    assert all(t["created"] and t["queue"] == QUEUE for t in accepted)
                    ids += [t["task_id"] for t in accepted]
                await until(lambda: all_ended(engine, n), within=60, every=0.1, what="500 tasks ended")
                elapsed = time.monotonic() - started
                last = (await client.get(f"/api/v1/ai/tasks/{ids[-1]}/result")).json()["data"]
            result = await outcome(engine)
            runs = read_records(record)
    finally:
        api.stop()
        await engine.dispose()
    _report("sqlite api + worker", tasks=n, submit_to_all_done_s=elapsed)

    assert last == {"task_id": ids[-1], "state": "succeeded", "result": {"tag": tag(n - 1)}}
    assert result.problems(ids, attempts=1) == []
    assert sorted(t for t, _, _ in runs) == [tag(i) for i in range(n)]
    assert {pid for _, _, pid in runs} == {worker.pid}
    assert {a["worker"] for rows in result.attempts.values() for a in rows} == {worker.worker_id}
