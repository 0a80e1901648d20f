"""The durable task engine (issue 10): throughput, enqueue rate, latency, SQLite, and a pinned vacuum horizon,
with Celery 5 on Redis as the reference — each scenario measured once, in one run, on this machine.

Usage::

    .venv/bin/python bench/task_bench.py                      # everything (~2.5-3.5 min; first run installs Celery)
    .venv/bin/python bench/task_bench.py --only drain,celery  # some scenarios (names below)
    .venv/bin/python bench/task_bench.py --tasks 20000 --repeat 3 --profile

Scenarios (``--only`` names):

``drain``    10,000 ``test.noop`` tasks on PostgreSQL end to end: this process submits them through
             ``TaskService.submit`` in batches of 1,000 while ONE worker, a real ``hearth worker -q bench
             --concurrency 64`` OS process (Redis state backend), drains them. Tasks/s = N / (max(finished_at)
             - min(created_at)) over the tasks table (``created_at`` is taken by the submitter before its
             transaction, ``finished_at`` by the worker when the handler returned — the same machine's clock);
             the wall time to the moment a 50 ms poll of ``count(*) … state = 'succeeded'`` saw all of them is
             the cross-check. 64 warm-up tasks run first (connections, LISTEN), not counted. With ``--repeat R``
             the same worker and database then run R-1 more batches of N: the unpinned control of ``pinned``.
``celery``   The same N no-op tasks through Celery 5 (own venv ``bench/.venv-celery``), Redis broker and result
             backend on db 13, ``acks_late=True``, ``worker_prefetch_multiplier=1``, ONE worker process
             ``--pool threads --concurrency 64`` (one process, 64 slots, like the Hearth worker; prefork would
             be 64 processes). Enqueued with ``group(...).apply_async()`` per 1,000 from a driver process
             (``bench/celery_driver.py``); end = the newest result ``date_done`` (the worker's clock, like
             ``finished_at``), cross-checked by a 50 ms poll of the result keys.
``prefilled`` Both engines draining a queue filled beforehand (no submitter running): the worker alone. Each
             worker is started and warmed up, stopped (SIGSTOP), the queue filled, and the worker continued.
             Hearth: N / (max(finished_at) - min(started_at)); Celery: N / (newest - oldest ``date_done``).
             Separates the worker's cost from the enqueue's (Celery's enqueue is the slower part of its
             end-to-end time).
``enqueue``  N tasks in batches of 1,000 through ``TaskService.submit`` on a fresh database, no worker.
``sleep``    2,000 ``test.sleep`` tasks of 50 ms at concurrency 64, one worker process (ideal 64 / 0.05 s = 1,280/s).
``latency``  300 single tasks submitted one at a time, 20 ms apart, to an idle worker; started_at - created_at
             (both written on this machine) → p50 / p99. Split in two beside it: the submit call's own duration
             (its transaction, which the latency includes) and from the call's return to ``started_at``.
``sqlite``   The embedded mode: 2,000 no-op tasks through ONE process on a SQLite file (WAL) — TaskService and
             Worker (concurrency 64, default settings) on one engine and event loop, as ``hearth serve`` runs them.
``pinned``   ``drain`` again on a fresh database (own worker) while another connection to that database holds
             ``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM tasks`` open from before the first
             submit to after the last drain (the state of a database whose oldest transaction is 10 minutes old:
             no tuple that dies after it can be vacuumed, pruned or skipped in an index; a snapshot, not an xid —
             see :class:`Pin`). ``--repeat R`` (default 5) rounds under the same transaction show the trend. The
             rounds of ``drain`` and ``pinned`` alternate (drain 1, pinned 1, drain 2, …) so that each pair meets
             the same machine; ratio = pinned / drain of round 1. After every round the claim query and the
             admission count run under EXPLAIN ANALYZE on the (empty) queue: walking every index entry not yet
             skippable, their time and buffers are an upper bound of what a claim from the head / an exact count
             pays for them. ``--pin-minutes M`` keeps adding rounds until the pin is M minutes old (target 7:
             ``--only drain,pinned --pin-minutes 10``, ~11 minutes and ~1.4 M tasks per lane here); the report
             then adds the ratio by blocks of ten rounds with the pin's age.

``--profile`` adds a py-spy recording of the Hearth worker during one more ``drain`` (a separate run, so the
sampling does not touch the measured ones): ``bench/results/task-<ts>-pyspy.txt`` (collapsed stacks) and a
summary of the hottest frames in the JSON.

Placement: nothing is pinned (PostgreSQL's backends float anyway); the CPU seconds used by the worker, by the
PostgreSQL server processes (every ``postgres`` process — approximate on a shared machine) and by this
process (and its exited children: the Celery driver) are read from /proc around each run and reported per
1,000 tasks, with ``other_cores``: what the rest of the machine used meanwhile (its noise). Each drain also
reports the worker's cycles as the table shows them (claims, tasks per claim, time between claims) and the WAL
written per task. Only 127.0.0.1 is contacted.

Everything started is stopped, each database (``hearth_bench_*``) dropped, and every Redis key the run wrote
deleted (Hearth's under a unique prefix on db 12; Celery's db 13, which must be empty at start) — on success,
error, Ctrl-C or SIGTERM. Output: a table on stdout, ``bench/results/task-<ts>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

import asyncpg
import redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.store.db import create_engine, migrate
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.types import TaskTypes
from hearth.tasks.worker import Worker, WorkerConfig
from hearth.testing.task_types import register as register_test_types

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
CELERY_VENV = BENCH / ".venv-celery"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379"
HEARTH_REDIS_DB = 12
CELERY_REDIS_DB = 13
QUEUE = "bench"
SCENARIOS = ("drain", "celery", "prefilled", "enqueue", "sleep", "latency", "sqlite", "pinned")
TARGETS = {  # issue 10's acceptance targets
    "drain_per_s": 2500, "drain_vs_celery": 2.0, "enqueue_per_s": 10_000, "sleep_per_s": 1150,
    "latency_p50_ms": 5.0, "latency_p99_ms": 20.0, "sqlite_per_s": 500, "pinned_ratio": 0.65,
}
CLK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- processes, CPU, clean-up

class Started:
    """Every process this run started (stopped at exit, by pid) and every Redis prefix it wrote under."""

    procs: ClassVar[list[subprocess.Popen[bytes]]] = []
    redis_prefixes: ClassVar[list[str]] = []
    celery_db_used = False

    @classmethod
    def stop(cls, proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc in cls.procs:
            cls.procs.remove(proc)

    @classmethod
    def clean_up(cls) -> None:
        for proc in list(cls.procs):
            cls.stop(proc, grace_s=5)
        r = redis.Redis.from_url(f"{REDIS}/{HEARTH_REDIS_DB}")
        for prefix in cls.redis_prefixes:
            keys = list(r.scan_iter(match=prefix + "*", count=1000))
            for i in range(0, len(keys), 1000):
                r.delete(*keys[i:i + 1000])
        cls.redis_prefixes.clear()
        if cls.celery_db_used:
            redis.Redis.from_url(f"{REDIS}/{CELERY_REDIS_DB}").flushdb()  # ours alone: checked empty at start
            cls.celery_db_used = False


def proc_cpu(pid: int) -> float:
    """utime + stime of a process (and its reaped children), seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / CLK


def postgres_cpu() -> float:
    """CPU seconds of every process named ``postgres`` on this machine (the server and its backends)."""
    total = 0.0
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == "postgres":
                    total += proc_cpu(int(d.name))
            except OSError:
                pass
    return total


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy (all CPUs, /proc/stat: everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK


class CpuMeter:
    """CPU seconds used by a worker, PostgreSQL and this process between start() and stop(), per 1,000 tasks;
    and, in cores, what everything else on the machine used meanwhile (the noise of a shared machine)."""

    def __init__(self, worker_pid: int | None) -> None:
        self.pid = worker_pid
        self.out: dict[str, float] = {}

    def start(self) -> None:
        self._w, self._pg, self._me, self._all, self._t = self._read()

    def stop(self, tasks: int) -> dict[str, float]:
        w, pg, me, busy, t = self._read()
        k = 1000 / tasks
        ours = (w - self._w) + (pg - self._pg) + (me - self._me)
        self.out = {"worker_cpu_s_per_1k": round((w - self._w) * k, 3),
                    "pg_cpu_s_per_1k": round((pg - self._pg) * k, 3),
                    "bench_cpu_s_per_1k": round((me - self._me) * k, 3),
                    "other_cores": round(max(0.0, (busy - self._all) - ours) / (t - self._t), 2)}
        return self.out

    def _read(self) -> tuple[float, float, float, float, float]:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # e.g. the Celery driver, once it has exited
        me = time.process_time() + children.ru_utime + children.ru_stime
        return (proc_cpu(self.pid) if self.pid else 0.0), postgres_cpu(), me, machine_busy(), time.monotonic()


# --------------------------------------------------------------------------- PostgreSQL and the Hearth worker

@contextlib.asynccontextmanager
async def pg_database(tag: str) -> AsyncIterator[tuple[str, AsyncEngine]]:
    """A fresh database ``hearth_bench_<tag>_<random>``, migrated; dropped afterwards."""
    name = f"hearth_bench_{tag}_{uuid.uuid4().hex[:6]}"
    admin = await asyncpg.connect(PG_ADMIN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    engine = create_engine(url)
    try:
        await migrate(engine)
        yield url, engine
    finally:
        await engine.dispose()
        admin = await asyncpg.connect(PG_ADMIN)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def hearth_command() -> list[str]:
    script = Path(sys.executable).parent / "hearth"
    return [str(script)] if script.exists() else [sys.executable, "-m", "hearth"]


class HearthWorker:
    """``hearth worker -q bench --concurrency C`` as an OS process, on the given database, Redis state."""

    def __init__(self, database_url: str, concurrency: int, log: Path) -> None:
        self.prefix = f"hearth_bench_{uuid.uuid4().hex[:8]}:"
        Started.redis_prefixes.append(self.prefix)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
        env.update({
            "HEARTH_TASK_MODULES": "hearth.testing.task_types:register", "HEARTH_TEST_TASK_QUEUE": QUEUE,
            "HEARTH_TASK_QUEUES": f"{QUEUE}={concurrency}", "HEARTH_DATABASE_URL": database_url,
            "HEARTH_STATE_BACKEND": "redis", "HEARTH_REDIS_URL": f"{REDIS}/{HEARTH_REDIS_DB}",
            "HEARTH_REDIS_PREFIX": self.prefix, "HEARTH_MASTER_KEY": "00" * 32,
        })
        self.log = log
        self._fh = open(log, "wb")
        self.proc = subprocess.Popen([*hearth_command(), "worker", "-q", QUEUE, "--concurrency", str(concurrency)],
                                     env=env, cwd=tempfile.gettempdir(), stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        Started.procs.append(self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def ready(self, timeout_s: float = 60) -> None:
        until = time.monotonic() + timeout_s
        while b" serving " not in self.log.read_bytes():
            if self.proc.poll() is not None:
                raise SystemExit(f"hearth worker exited ({self.proc.returncode}); see {self.log}:\n"
                                 + self.log.read_text()[-2000:])
            if time.monotonic() > until:
                raise SystemExit(f"hearth worker not ready after {timeout_s:g} s; see {self.log}")
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        Started.stop(self.proc)
        self._fh.close()


def task_types() -> TaskTypes:
    os.environ["HEARTH_TEST_TASK_QUEUE"] = QUEUE
    types = TaskTypes()
    register_test_types(types)
    return types


def task_service(engine: AsyncEngine, wakeups: Wakeups | None = None) -> TaskService:
    """A submitter like the API's (bounds raised so that one caller may queue a whole run)."""
    return TaskService(engine=engine, types=task_types(),
                       queues={QUEUE: QueueLimits(max_depth=10_000_000, max_per_key=10_000_000)},
                       wakeups=wakeups or Wakeups(), guard=AddressGuard(), callbacks_enabled=False)


async def submit(svc: TaskService, n: int, *, caller: str, task_type: str = "test.noop",
                 payload: dict[str, Any] | None = None, batch: int = 1000) -> list[float]:
    """Submit n tasks in batches; the duration of each submit call (s)."""
    took = []
    for i in range(0, n, batch):
        subs = [Submission(task_type=task_type, payload=dict(payload or {}), caller=caller, queue=QUEUE)
                for _ in range(min(batch, n - i))]
        t = time.perf_counter()
        await svc.submit(subs)
        took.append(time.perf_counter() - t)
    return took


async def wait_done(engine: AsyncEngine, caller: str, n: int, timeout_s: float, poll_s: float = 0.05) -> float:
    """Poll until the caller's n tasks all succeeded; the time.time() when the poll saw it."""
    sql = text("SELECT count(*) FILTER (WHERE state = 'succeeded'), "
               "count(*) FILTER (WHERE state IN ('failed', 'killed', 'hold', 'skipped')) "
               "FROM tasks WHERE caller = :c")
    until = time.monotonic() + timeout_s
    while True:
        async with engine.connect() as conn:
            ok, bad = (await conn.execute(sql, {"c": caller})).one()
        if bad:
            raise SystemExit(f"{bad} of {caller}'s tasks ended other than succeeded")
        if ok >= n:
            return time.time()
        if time.monotonic() > until:
            raise SystemExit(f"{caller}: only {ok} of {n} tasks succeeded after {timeout_s:g} s")
        await asyncio.sleep(poll_s)


async def wal_lsn(engine: AsyncEngine) -> int:
    """The server's WAL position in bytes (cluster-wide: another database's writes count too)."""
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"))).scalar_one())


async def table_times(engine: AsyncEngine, caller: str) -> dict[str, float]:
    async with engine.connect() as conn:
        row = (await conn.execute(text(
            "SELECT count(*), min(created_at), max(created_at), min(started_at), max(finished_at) "
            "FROM tasks WHERE caller = :c"), {"c": caller})).one()
    return {"n": row[0], "created_first": row[1], "created_last": row[2], "started_first": row[3],
            "finished_last": row[4]}


async def cycle_stats(engine: AsyncEngine, caller: str) -> dict[str, Any]:
    """The worker's cycles as the table shows them: one claim sets one ``started_at`` for all it took, one
    completing cycle one ``updated_at`` — so claims per cycle, and the time from one claim to the next."""
    async with engine.connect() as conn:
        claims = [(r[0], r[1]) for r in (await conn.execute(text(
            "SELECT started_at, count(*) FROM tasks WHERE caller = :c GROUP BY started_at ORDER BY started_at"),
            {"c": caller})).all()]
        writes, run_ms = (await conn.execute(text(
            "SELECT count(DISTINCT updated_at), percentile_cont(0.5) WITHIN GROUP (ORDER BY finished_at - started_at) "
            "* 1000 FROM tasks WHERE caller = :c"), {"c": caller})).one()
    gaps = sorted((b[0] - a[0]) * 1000 for a, b in itertools.pairwise(claims))
    sizes = sorted(n for _, n in claims)
    return {"claims": len(claims), "completion_writes": writes, "run_ms_p50": round(run_ms, 2),
            "claim_size_p50": pct(sizes, 50),
            "claim_size_mean": round(sum(sizes) / len(sizes), 1),
            "claim_gap_ms_p50": round(pct(gaps, 50), 2) if gaps else None,
            "claim_gap_ms_p90": round(pct(gaps, 90), 2) if gaps else None}


async def drain_once(engine: AsyncEngine, svc: TaskService, worker: HearthWorker | None, *, n: int, caller: str,
                     task_type: str = "test.noop", payload: dict[str, Any] | None = None,
                     timeout_s: float = 300) -> dict[str, Any]:
    """Submit n tasks (batches of 1,000) while the worker drains them; tasks/s from the table and by the poll."""
    cpu = CpuMeter(worker.pid if worker else None)
    wal0 = await wal_lsn(engine)
    cpu.start()
    t0 = time.time()
    took = await submit(svc, n, caller=caller, task_type=task_type, payload=payload)
    t_submitted = time.time()
    t_seen = await wait_done(engine, caller, n, timeout_s)
    out = cpu.stop(n)
    out["wal_bytes_per_task"] = round((await wal_lsn(engine) - wal0) / n)
    tt = await table_times(engine, caller)
    elapsed = tt["finished_last"] - tt["created_first"]
    out.update({"tasks": n, "per_s": round(n / elapsed), "elapsed_s": round(elapsed, 3),
                "wall_per_s": round(n / (t_seen - t0)), "wall_s": round(t_seen - t0, 3),
                "submit_s": round(t_submitted - t0, 3), "submit_batch_ms": [round(x * 1000, 1) for x in took],
                "cycles": await cycle_stats(engine, caller)})
    return out


async def warm_up(engine: AsyncEngine, svc: TaskService, worker: HearthWorker | None) -> None:
    await drain_once(engine, svc, worker, n=64, caller="warmup", timeout_s=60)


@contextlib.asynccontextmanager
async def pg_with_worker(tag: str, concurrency: int, ts: str) -> AsyncIterator[tuple[str, AsyncEngine, TaskService,
                                                                                     HearthWorker]]:
    async with pg_database(tag) as (url, engine):
        worker = HearthWorker(url, concurrency, RESULTS / f"task-{ts}-worker-{tag}.log")
        try:
            await worker.ready()
            svc = task_service(engine)
            await warm_up(engine, svc, worker)
            yield url, engine, svc, worker
        finally:
            worker.stop()


async def table_stats(engine: AsyncEngine) -> dict[str, Any]:
    """Dead tuples and size of the tasks table (what the pinned horizon lets pile up), and what the claim and the
    admission count cost now: EXPLAIN ANALYZE of both on the (empty) queue — each still walks every index entry
    it cannot yet skip."""
    async with engine.connect() as conn:
        row = (await conn.execute(text(
            "SELECT n_live_tup, n_dead_tup, n_tup_hot_upd, n_tup_upd, pg_total_relation_size('tasks') "
            "FROM pg_stat_user_tables WHERE relname = 'tasks'"))).one()
        out: dict[str, Any] = {"live": row[0], "dead": row[1], "hot_updates": row[2], "updates": row[3],
                               "total_mb": round(row[4] / 2**20, 1)}
        for name, sql in (("claim", CLAIM_SQL), ("count", COUNT_SQL)):
            plan = (await conn.execute(text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql),
                                       {"now": time.time(), "types": ["test.noop"]})).scalar_one()
            plan = plan[0] if isinstance(plan, list) else json.loads(plan)[0]
            out[f"{name}_ms"] = round(plan["Execution Time"], 2)
            top = plan["Plan"]
            out[f"{name}_buffers"] = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
            out[f"{name}_plan"] = plan_shape(top)
    return out


def plan_shape(node: dict[str, Any]) -> str:
    """``Limit > LockRows > Index Scan(ix_tasks_claim)``: the nodes of a JSON plan, first child first."""
    name = node["Node Type"] + (f"({node['Index Name']})" if "Index Name" in node else "")
    kids = node.get("Plans") or []
    return name + (" > " + plan_shape(kids[0]) if kids else "")


# what queue.claim selects and queue._admit counts (src/hearth/tasks/queue.py), for EXPLAIN
CLAIM_SQL = ("SELECT id FROM tasks WHERE queue = 'bench' AND state = 'queued' AND run_after <= :now "
             "AND task_type = ANY(:types) ORDER BY priority DESC, fair_seq, created_at, id LIMIT 64 "
             "FOR UPDATE SKIP LOCKED")
COUNT_SQL = "SELECT count(*) FROM tasks WHERE queue = 'bench' AND state IN ('queued', 'waiting')"


class Pin:
    """A transaction on the database that stays open with a REPEATABLE READ snapshot: the vacuum horizon of that
    database cannot pass its xmin, so no tuple that dies after it can be pruned, vacuumed or skipped in an index.

    Snapshot only, no ``txid_current()``: a transaction that holds an xid is "running" in every snapshot taken
    anywhere in the cluster, so it would pin the other databases' horizons too (through their own backends'
    xmin) — measured: it made the unpinned lane's claim walk the same 10,113 buffers as the pinned lane's.
    With a snapshot alone only backends of this database are held back (PostgreSQL ≥ 14), so the lanes can
    alternate, and the unpinned one stays clean (its claim reads ~60 buffers throughout)."""

    def __init__(self, url: str) -> None:
        self.dsn = url.replace("postgresql+asyncpg://", "postgresql://")

    async def __aenter__(self) -> Pin:
        self.conn = await asyncpg.connect(self.dsn)
        await self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await self.conn.fetchval("SELECT count(*) FROM tasks")  # the snapshot is taken: xmin pinned
        self.xmin = await self.conn.fetchval("SELECT txid_snapshot_xmin(txid_current_snapshot())::text")
        self.opened = time.monotonic()
        return self

    async def held(self) -> dict[str, Any]:
        admin = await asyncpg.connect(self.dsn)
        try:
            row = await admin.fetchrow("SELECT backend_xmin::text AS xmin, extract(epoch FROM now() - xact_start) AS s "
                                       "FROM pg_stat_activity WHERE pid = $1", self.conn.get_server_pid())
        finally:
            await admin.close()
        return {"pin_snapshot_xmin": self.xmin, "pin_backend_xmin": row["xmin"],
                "pin_held_s": round(float(row["s"]), 1)}

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.conn.execute("ROLLBACK")
        await self.conn.close()


async def scenario_drain_pinned(args: argparse.Namespace, ts: str, which: list[str]) -> dict[str, Any]:
    """1 and 7: N no-op tasks end to end on PostgreSQL, one worker process — and the same under a pinned horizon.

    With both, each has its own database and worker, and their rounds alternate (drain 1, pinned 1, drain 2, …)
    so that round k of each meets the same machine; the pin is opened before pinned round 1's first submit and
    held to the end of the last pinned round. Round 1 is the measured one; rounds 2…R show the trend (R-1
    more batches of N on the same database and worker)."""
    out: dict[str, Any] = {name: {"rounds": []} for name in which}
    async with contextlib.AsyncExitStack() as stack:
        lanes = {name: await stack.enter_async_context(pg_with_worker(name, args.concurrency, ts)) for name in which}
        pin = await stack.enter_async_context(Pin(lanes["pinned"][0])) if "pinned" in lanes else None
        r = 0
        # --repeat rounds, or with --pin-minutes as many as it takes for the pin to reach that age
        while r < args.repeat or (pin is not None and time.monotonic() - pin.opened < args.pin_minutes * 60):
            for name, (_url, engine, svc, worker) in lanes.items():
                run = await drain_once(engine, svc, worker, n=args.tasks, caller=f"{name}{r}")
                run["table"] = await table_stats(engine)
                if name == "pinned" and pin is not None:
                    run["pin_age_s"] = round(time.monotonic() - pin.opened, 1)
                out[name]["rounds"].append(run)
                print(f"  {name} round {r + 1}: {run['per_s']:,} tasks/s (wall {run['wall_per_s']:,}; claim query "
                      f"{run['table']['claim_ms']} ms, {run['table']['claim_buffers']} buffers)", flush=True)
            r += 1
        if pin is not None:
            out["pinned"].update(await pin.held())
    for name in which:
        out[name].update({k: v for k, v in out[name]["rounds"][0].items() if k != "table"})
    return out


async def scenario_enqueue(args: argparse.Namespace, ts: str) -> dict[str, Any]:
    """3: N tasks in batches of 1,000 through TaskService.submit, no worker running."""
    async with pg_database("enqueue") as (_url, engine):
        svc = task_service(engine)
        await submit(svc, 1000, caller="warmup")  # connections, statement cache
        cpu = CpuMeter(None)
        cpu.start()
        t = time.perf_counter()
        took = await submit(svc, args.tasks, caller="enqueue")
        elapsed = time.perf_counter() - t
        out = cpu.stop(args.tasks)
        out.pop("worker_cpu_s_per_1k")
        depth = await table_stats(engine)  # the admission count(*) at this depth (every submit runs it)
        return {"tasks": args.tasks, "per_s": round(args.tasks / elapsed), "elapsed_s": round(elapsed, 3),
                "submit_batch_ms": [round(x * 1000, 1) for x in took], **out,
                "count_ms_at_depth": {"depth": args.tasks + 1000, "ms": depth["count_ms"]}}


async def scenario_sleep(args: argparse.Namespace, ts: str) -> dict[str, Any]:
    """4: 2,000 tasks of 50 ms at concurrency 64, one worker process."""
    n = args.sleep_tasks
    async with pg_with_worker("sleep", args.concurrency, ts) as (_url, engine, svc, worker):
        out = await drain_once(engine, svc, worker, n=n, caller="sleep", task_type="test.sleep", payload={"ms": 50})
        tt = await table_times(engine, "sleep")
        ideal = args.concurrency / 0.05
        out.update({"ideal_per_s": round(ideal), "of_ideal": round(out["per_s"] / ideal, 3),
                    "worker_only_per_s": round(n / (tt["finished_last"] - tt["started_first"])),
                    "first_start_ms": round((tt["started_first"] - tt["created_first"]) * 1000, 1)})
        return out


async def scenario_latency(args: argparse.Namespace, ts: str) -> dict[str, Any]:
    """5: single tasks one at a time, 20 ms apart, to an idle worker; started_at - created_at.

    Split in two: the submit call itself (``created_at`` is taken before its transaction begins, so its
    round trips count), and from the call's return (the commit, which sends the NOTIFY) to ``started_at``."""
    n = args.latency_tasks
    async with pg_with_worker("latency", args.concurrency, ts) as (_url, engine, svc, worker):
        meter = CpuMeter(worker.pid)
        meter.start()
        took, returned = [], {}
        for _ in range(n):
            t = time.perf_counter()
            ((row, _),) = await svc.submit([Submission(task_type="test.noop", payload={}, caller="latency",
                                                       queue=QUEUE)])
            returned[row["id"]] = time.time()
            took.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(0.02)
        await wait_done(engine, "latency", n, 60)
        noise = meter.stop(n)["other_cores"]
        async with engine.connect() as conn:
            rows = (await conn.execute(text(
                "SELECT id, created_at, started_at FROM tasks WHERE caller = 'latency'"))).all()
    lat = sorted((r[2] - r[1]) * 1000 for r in rows)
    after = sorted((r[2] - returned[r[0]]) * 1000 for r in rows)
    sub = sorted(took)
    return {"tasks": n, "p50_ms": round(pct(lat, 50), 2), "p90_ms": round(pct(lat, 90), 2),
            "p99_ms": round(pct(lat, 99), 2), "max_ms": round(lat[-1], 2),
            "submit_p50_ms": round(pct(sub, 50), 2), "submit_p99_ms": round(pct(sub, 99), 2),
            "return_to_start_p50_ms": round(pct(after, 50), 2), "return_to_start_p99_ms": round(pct(after, 99), 2),
            "other_cores": noise}


async def scenario_sqlite(args: argparse.Namespace, ts: str) -> dict[str, Any]:
    """6: the embedded mode — submitter and worker in this one process, on a SQLite file."""
    n = args.sqlite_tasks
    with tempfile.TemporaryDirectory(prefix="hearth_bench_") as tmp:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp}/hearth.db")
        try:
            await migrate(engine)
            wakeups = Wakeups()
            svc = task_service(engine, wakeups)
            worker = Worker(engine, svc.types, None, WorkerConfig(queues={QUEUE: args.concurrency}), wakeups=wakeups)
            await worker.start()
            try:
                for caller, count in (("warmup", 64), ("sqlite", n)):
                    meter = CpuMeter(None)
                    meter.start()
                    took = await submit(svc, count, caller=caller)
                    await wait_done(engine, caller, count, 120, poll_s=0.05)
                    cpu = meter.stop(count)
                tt = await table_times(engine, "sqlite")
            finally:
                await worker.stop()
        finally:
            await engine.dispose()
    elapsed = tt["finished_last"] - tt["created_first"]
    return {"tasks": n, "per_s": round(n / elapsed), "elapsed_s": round(elapsed, 3),
            "submit_batch_ms": [round(x * 1000, 1) for x in took], "process_cpu_s_per_1k": cpu["bench_cpu_s_per_1k"],
            "other_cores": cpu["other_cores"]}


def ensure_celery() -> Path:
    python = CELERY_VENV / "bin" / "python"
    if not (CELERY_VENV / "bin" / "celery").exists():
        print("  installing Celery into bench/.venv-celery (once)…", flush=True)
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(CELERY_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "celery[redis]>=5,<6"], check=True)
    return python


class CeleryWorker:
    def __init__(self, log: Path, concurrency: int, pool: str) -> None:
        self.env = {**os.environ, "BENCH_CELERY_BROKER": f"{REDIS}/{CELERY_REDIS_DB}", "PYTHONPATH": str(BENCH)}
        self.log = log
        self._fh = open(log, "wb")
        cmd = [str(CELERY_VENV / "bin" / "celery"), "-A", "celery_tasks", "worker", "-Q", QUEUE, "--pool", pool,
               "--concurrency", str(concurrency), "--prefetch-multiplier", "1", "--loglevel", "warning",
               "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"bench-{uuid.uuid4().hex[:6]}@%h"]
        self.proc = subprocess.Popen(cmd, env=self.env, cwd=BENCH, stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        Started.procs.append(self.proc)

    def stop(self) -> None:
        Started.stop(self.proc)
        self._fh.close()


def celery_db() -> redis.Redis:
    r = redis.Redis.from_url(f"{REDIS}/{CELERY_REDIS_DB}")
    if r.dbsize() and not Started.celery_db_used:
        raise SystemExit(f"Redis db {CELERY_REDIS_DB} is not empty: the bench uses it alone and empties it "
                         "afterwards; pick another with --celery-db or empty it")
    Started.celery_db_used = True
    return r


def spawn(cmd: list[str], *, env: dict[str, str], stdout: Any, stderr: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, env=env, cwd=BENCH, stdout=stdout, stderr=stderr)
    Started.procs.append(proc)
    return proc


async def celery_driver(python: Path, worker: CeleryWorker, *args: str, limit_s: float = 600) -> dict[str, Any]:
    """Run bench/celery_driver.py; its JSON. Fails at once if the Celery worker dies meanwhile."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = spawn([str(python), str(BENCH / "celery_driver.py"), *args], env=worker.env, stdout=out, stderr=err)
        until = time.monotonic() + limit_s
        try:
            while proc.poll() is None:
                if worker.proc.poll() is not None:
                    raise SystemExit(f"the Celery worker exited ({worker.proc.returncode}); see {worker.log}")
                if time.monotonic() > until:
                    raise SystemExit(f"celery driver still running after {limit_s:g} s")
                await asyncio.sleep(0.1)
        finally:
            Started.stop(proc, grace_s=2)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"celery driver failed ({proc.returncode}):\n{err.read().decode()[-3000:]}")
        return json.loads(out.read().decode().strip().splitlines()[-1])


async def scenario_celery(args: argparse.Namespace, ts: str) -> dict[str, Any]:
    """2: the same N no-op tasks through Celery, one worker process (threads, concurrency 64)."""
    python = ensure_celery()
    r = celery_db()
    worker = CeleryWorker(RESULTS / f"task-{ts}-celery.log", args.concurrency, args.celery_pool)
    try:
        cpu = CpuMeter(worker.proc.pid)
        cpu.start()
        out = await celery_driver(python, worker, "--tasks", str(args.tasks), "--warmup", "64")
        out.update(cpu.stop(args.tasks + 64))
        out.pop("pg_cpu_s_per_1k")
        out["driver_cpu_s_per_1k"] = out.pop("bench_cpu_s_per_1k")  # the enqueuing client (a child process)
    finally:
        worker.stop()
        r.flushdb()
    out["pool"] = f"{args.celery_pool}, concurrency {args.concurrency}"
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in out.items()}


async def scenario_prefilled(args: argparse.Namespace, ts: str) -> dict[str, Any]:
    """Both engines draining a queue filled beforehand: the worker is started and warmed up, stopped with
    SIGSTOP, the queue filled, and the worker continued (SIGCONT) — its cost alone, no submitter running."""
    out: dict[str, Any] = {}
    async with pg_with_worker("prefilled", args.concurrency, ts) as (_url, engine, svc, worker):
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            await submit(svc, args.tasks, caller="prefilled")
            cpu = CpuMeter(worker.pid)
            cpu.start()
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        await wait_done(engine, "prefilled", args.tasks, 300)
        hearth_cpu = cpu.stop(args.tasks)
        tt = await table_times(engine, "prefilled")
        elapsed = tt["finished_last"] - tt["started_first"]
        out["hearth"] = {"per_s": round(args.tasks / elapsed), "elapsed_s": round(elapsed, 3), **hearth_cpu}
    python = ensure_celery()
    r = celery_db()
    worker_c = CeleryWorker(RESULTS / f"task-{ts}-celery-prefilled.log", args.concurrency, args.celery_pool)
    try:
        await celery_driver(python, worker_c, "--tasks", "64", "--warmup", "0")
        os.kill(worker_c.proc.pid, signal.SIGSTOP)
        try:
            filled = await celery_driver(python, worker_c, "--tasks", str(args.tasks), "--enqueue-only")
            cpu = CpuMeter(worker_c.proc.pid)
            cpu.start()
        finally:
            os.kill(worker_c.proc.pid, signal.SIGCONT)
        done = await celery_driver(python, worker_c, "--wait-ids", filled["ids_file"])
        celery_cpu = cpu.stop(args.tasks)
        celery_cpu.pop("pg_cpu_s_per_1k")
        os.unlink(filled["ids_file"])
    finally:
        worker_c.stop()
        r.flushdb()
    out["celery"] = {"per_s": round(done["drain_per_s"]), "elapsed_s": round(done["drain_s"], 3),
                     "enqueue_per_s": round(filled["enqueue_per_s"]), **celery_cpu}
    out["hearth_vs_celery"] = round(out["hearth"]["per_s"] / out["celery"]["per_s"], 2)
    return out


async def profile_worker(args: argparse.Namespace, ts: str) -> dict[str, Any]:
    """py-spy on the Hearth worker during one more drain (not one of the measured runs)."""
    pyspy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if pyspy is None:
        return {"skipped": "py-spy not installed (.venv/bin/pip install py-spy)"}
    raw = RESULTS / f"task-{ts}-pyspy.txt"
    async with pg_with_worker("profile", args.concurrency, ts) as (_url, engine, svc, worker):
        spy = await asyncio.create_subprocess_exec(
            pyspy, "record", "--pid", str(worker.pid), "--format", "raw", "-o", str(raw), "--rate", "200",
            "--nonblocking", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            await asyncio.sleep(1.0)
            run = await drain_once(engine, svc, worker, n=args.tasks, caller="profile")
            spy.send_signal(signal.SIGINT)
            await asyncio.wait_for(spy.wait(), 30)
        finally:
            if spy.returncode is None:
                spy.kill()
                await spy.wait()
    return {"per_s_under_pyspy": run["per_s"], "file": str(raw.relative_to(ROOT)), **hottest(raw)}


def hottest(raw: Path, n: int = 20) -> dict[str, Any]:
    """From a py-spy raw (collapsed) profile: the share of samples per frame, inclusive (frames of Hearth,
    SQLAlchemy, asyncpg, asyncio) and self (the leaf)."""
    if not raw.exists():
        return {}
    total = 0
    incl: dict[str, int] = {}
    leaf: dict[str, int] = {}

    def name(frame: str) -> str:  # "func (path/to/file.py:123)" → "func (file.py)"
        func, _, where = frame.partition(" (")
        return f"{func} ({where.rsplit('/', 1)[-1].split(':')[0]})"

    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = stack.split(";")
        leaf[name(frames[-1])] = leaf.get(name(frames[-1]), 0) + c
        for frame in {name(f) for f in frames if any(k in f for k in ("hearth/", "sqlalchemy/", "asyncpg/"))}:
            incl[frame] = incl.get(frame, 0) + c

    def top(d: dict[str, int]) -> dict[str, float]:
        return {k: round(v / total, 3) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n]}

    return {"samples": total, "inclusive": top(incl), "self": top(leaf)}


# --------------------------------------------------------------------------- report

def pct(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values) + 0.5) - 1))]


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def report(res: dict[str, Any], args: argparse.Namespace) -> str:
    s = res["scenarios"]
    lines = ["| scenario | result | target | status | other load (cores) |", "|---|---:|---|---|---:|"]

    def row(name: str, value: str, target: str, ok: bool | None, noise: Any = None) -> None:
        other = "" if noise is None else noise.get("other_cores", "")
        lines.append(f"| {name} | {value} | {target} | {'—' if ok is None else verdict(ok)} | {other} |")

    if "drain" in s:
        d = s["drain"]
        row(f"1. {d['tasks']:,} no-op, PostgreSQL, 1 worker c={args.concurrency}",
            f"{d['per_s']:,} tasks/s (wall {d['wall_per_s']:,})", f"≥ {TARGETS['drain_per_s']:,}/s",
            d["per_s"] >= TARGETS["drain_per_s"], d)
    if "celery" in s:
        c = s["celery"]
        row(f"2. same through Celery ({c['pool']})", f"{c['per_s']:,.0f} tasks/s (enqueue {c['enqueue_per_s']:,.0f}/s)",
            "reference", None, c)
        if "drain" in s:
            ratio = s["drain"]["per_s"] / c["per_s"]
            row("   Hearth ÷ Celery", f"{ratio:.2f}×", f"≥ {TARGETS['drain_vs_celery']:g}×",
                ratio >= TARGETS["drain_vs_celery"])
    if "prefilled" in s:
        p = s["prefilled"]
        row("   pre-filled queue, worker alone: Hearth / Celery",
            f"{p['hearth']['per_s']:,} / {p['celery']['per_s']:,} tasks/s ({p['hearth_vs_celery']}×)", "(extra)", None)
    if "enqueue" in s:
        e = s["enqueue"]
        row(f"3. enqueue {e['tasks']:,} in batches of 1,000, no worker", f"{e['per_s']:,} tasks/s",
            f"≥ {TARGETS['enqueue_per_s']:,}/s", e["per_s"] >= TARGETS["enqueue_per_s"], e)
    if "sleep" in s:
        z = s["sleep"]
        row(f"4. {z['tasks']:,} × 50 ms sleep, c={args.concurrency}", f"{z['per_s']:,} tasks/s ({z['of_ideal']:.0%} of "
            f"{z['ideal_per_s']:,})", f"≥ {TARGETS['sleep_per_s']:,}/s", z["per_s"] >= TARGETS["sleep_per_s"], z)
    if "latency" in s:
        lat = s["latency"]
        row("5. enqueue → start, idle worker, p50", f"{lat['p50_ms']} ms (submit call {lat['submit_p50_ms']} ms, "
            f"its return → start {lat['return_to_start_p50_ms']} ms)", f"≤ {TARGETS['latency_p50_ms']:g} ms",
            lat["p50_ms"] <= TARGETS["latency_p50_ms"], lat)
        row("   p99 (max)", f"{lat['p99_ms']} ms ({lat['max_ms']} ms)", f"≤ {TARGETS['latency_p99_ms']:g} ms",
            lat["p99_ms"] <= TARGETS["latency_p99_ms"])
    if "sqlite" in s:
        q = s["sqlite"]
        row(f"6. {q['tasks']:,} no-op, SQLite, one process", f"{q['per_s']:,} tasks/s",
            f"≥ {TARGETS['sqlite_per_s']}/s", q["per_s"] >= TARGETS["sqlite_per_s"], q)
    if "pinned" in s:
        pin = s["pinned"]
        if "drain" in s and len(pin.get("rounds") or []) > 1:
            # several rounds: the target is about an old pin, so judge the last ten rounds, not the first
            block = list(zip(s["drain"]["rounds"], pin["rounds"], strict=False))[-10:]
            u, p, age = _block_rates(block)
            aged = f", the pin {age / 60:.1f} min old" if age is not None else ""
            row("7. drain under a pinned vacuum horizon",
                f"{p:,.0f} tasks/s = {p / u:.0%} of unpinned (last {len(block)} rounds{aged})",
                f"≥ {TARGETS['pinned_ratio']:.0%}", p / u >= TARGETS["pinned_ratio"], pin)
        elif "drain" in s:
            ratio = pin["per_s"] / s["drain"]["per_s"]
            row("7. drain under a pinned vacuum horizon", f"{pin['per_s']:,} tasks/s = {ratio:.0%} of 1.",
                f"≥ {TARGETS['pinned_ratio']:.0%}", ratio >= TARGETS["pinned_ratio"], pin)
        else:
            row("7. drain under a pinned vacuum horizon", f"{pin['per_s']:,} tasks/s", "(no baseline run)", None)
    out = "\n".join(lines)
    if "pinned" in s and "drain" in s and len(s["pinned"]["rounds"]) > 1:
        trend = ["", "", "| round (N tasks each) | unpinned tasks/s | pinned tasks/s | pinned ÷ unpinned | claim query "
                 "after the round, ms (unpinned / pinned) | its buffers | admission count ms | tasks table MB |",
                 "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for i, (u, p) in enumerate(zip(s["drain"]["rounds"], s["pinned"]["rounds"], strict=False)):
            ut, pt = u["table"], p["table"]
            trend.append(f"| {i + 1} | {u['per_s']:,} | {p['per_s']:,} | {p['per_s'] / u['per_s']:.0%} | "
                         f"{ut['claim_ms']} / {pt['claim_ms']} | {ut['claim_buffers']:,} / {pt['claim_buffers']:,} | "
                         f"{ut['count_ms']} / {pt['count_ms']} | {ut['total_mb']} / {pt['total_mb']} |")
        out += "\n".join(trend)
        out += "\n".join(["", "", *pin_age_blocks(s["drain"]["rounds"], s["pinned"]["rounds"])])
    return out


def pin_age_blocks(unpinned: list[dict[str, Any]], pinned: list[dict[str, Any]], size: int = 10) -> list[str]:
    """The trend by blocks of ``size`` rounds: the pin's age at the block's end and pinned ÷ unpinned (ratio of the
    blocks' mean rates) — what target 7 asks about once the pin is minutes old."""
    pairs = list(zip(unpinned, pinned, strict=False))
    lines = ["| rounds | pin age at the end (min) | unpinned tasks/s | pinned tasks/s | pinned ÷ unpinned |",
             "|---|---:|---:|---:|---:|"]
    for i in range(0, len(pairs), size):
        block = pairs[i:i + size]
        u, p, age = _block_rates(block)
        lines.append(f"| {i + 1}–{i + len(block)} | {age / 60:.1f} | {u:,.0f} | {p:,.0f} | {p / u:.0%} |"
                     if age is not None else f"| {i + 1}–{i + len(block)} | – | {u:,.0f} | {p:,.0f} | {p / u:.0%} |")
    return lines


def _block_rates(block: list[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[float, float, float | None]:
    """Mean unpinned and pinned tasks/s of a block of round pairs, and the pin's age (s) at its last round."""
    u = sum(a["per_s"] for a, _ in block) / len(block)
    p = sum(b["per_s"] for _, b in block) / len(block)
    return u, p, block[-1][1].get("pin_age_s")


def machine() -> dict[str, Any]:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()[:10]
    return {"nproc": os.cpu_count(), "lscpu_head": lscpu, "python": platform.python_version(),
            "kernel": platform.release(), "loadavg_start": os.getloadavg()}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    ts = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    res: dict[str, Any] = {"run": ts, "command": " ".join(["python", *sys.argv]), "date_utc": time.strftime(
        "%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(), "args": vars(args), "scenarios": {}}
    funcs: dict[str, Callable[..., Any]] = {
        "celery": scenario_celery, "prefilled": scenario_prefilled, "enqueue": scenario_enqueue,
        "sleep": scenario_sleep, "latency": scenario_latency, "sqlite": scenario_sqlite}
    todo = [s for s in SCENARIOS if s in args.only and s != "pinned"]
    if "pinned" in args.only and "drain" not in args.only:
        todo.insert(0, "pinned")
    for name in todo:
        print(f"[{time.strftime('%H:%M:%S')}] {name} (load {os.getloadavg()[0]:.2f})", flush=True)
        t = time.monotonic()
        if name in ("drain", "pinned"):
            both = [s for s in ("drain", "pinned") if s in args.only]
            res["scenarios"].update(await scenario_drain_pinned(args, ts, both))
            done = both
        else:
            res["scenarios"][name] = await funcs[name](args, ts)
            done = [name]
        for d in done:
            res["scenarios"][d]["took_s"] = round(time.monotonic() - t, 1)
            print(f"  {d}: {json.dumps({k: v for k, v in res['scenarios'][d].items() if k != 'rounds'})}", flush=True)
    if args.profile:
        print(f"[{time.strftime('%H:%M:%S')}] py-spy profile of the worker", flush=True)
        res["profile"] = await profile_worker(args, ts)
    res["machine"]["loadavg_end"] = os.getloadavg()
    res["table"] = report(res, args)
    (RESULTS / f"task-{ts}.json").write_text(json.dumps(res, indent=2, default=str))
    (RESULTS / f"task-{ts}.md").write_text(res["table"] + "\n")
    print(f"\nrun {ts}, {res['date_utc']}, load {res['machine']['loadavg_start'][0]:.2f} → "
          f"{res['machine']['loadavg_end'][0]:.2f}\n\n{res['table']}\n\nbench/results/task-{ts}.json")
    return res


def main() -> None:
    global CELERY_REDIS_DB
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated, of: {', '.join(SCENARIOS)}")
    ap.add_argument("--tasks", type=int, default=10_000, help="tasks per drain / celery / enqueue / pinned run")
    ap.add_argument("--sleep-tasks", type=int, default=2000)
    ap.add_argument("--latency-tasks", type=int, default=300)
    ap.add_argument("--sqlite-tasks", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5, help="back-to-back rounds of drain and pinned (round 1 is "
                    "the measured one; the rest show the trend)")
    ap.add_argument("--pin-minutes", type=float, default=0.0, help="with pinned: more rounds until the pin is this "
                    "old (target 7 speaks of a 10-minute open transaction: --pin-minutes 10)")
    ap.add_argument("--celery-pool", default="threads", help="Celery pool of the one worker process")
    ap.add_argument("--celery-db", type=int, default=CELERY_REDIS_DB, help="a Redis db the bench may use alone")
    ap.add_argument("--profile", action="store_true", help="py-spy the Hearth worker during one extra drain")
    args = ap.parse_args()
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(args.only) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    CELERY_REDIS_DB = args.celery_db

    async def guarded() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        await run(args)

    try:
        asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted; cleaning up", file=sys.stderr)
        sys.exit(130)
    finally:
        Started.clean_up()


if __name__ == "__main__":
    main()
