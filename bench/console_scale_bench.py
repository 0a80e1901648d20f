"""The console and the list APIs at scale (issue 13: every console page and list API answers in ≤ 300 ms p95 with
1,000,000 request-log rows and 100,000 tasks in PostgreSQL).

1. A fresh PostgreSQL database (``hearth_bench_console``, dropped first if it exists) is migrated and filled with
   COPY: ``--logs`` request-log rows spread over the last 30 days (8 callers, 5 models, 8 endpoints, statuses
   mostly 200 with 4xx/5xx, log-normal latencies), then their rollups by ``rebuild_rollups`` (the code behind
   ``hearth rollups rebuild``; timed), and ``--tasks`` tasks in every state over 30 days with their events
   (3 per task) and attempts, a dead letter for each failed task, review items and schedules; then VACUUM ANALYZE.
2. One ``hearth serve`` process runs against it (memory state); the bench signs in to the console as admin.
3. Every console page and list API (the list in :func:`targets`) is requested ``--n`` times in a row after 3
   warm-up requests, one request at a time; each must answer 200. Reported per target: p50, p95, max (ms),
   and whether p95 ≤ 300 ms. ``--keep`` keeps the database (``--reuse`` then skips the generation).

Usage: ``.venv/bin/python bench/console_scale_bench.py [--logs 1000000] [--tasks 100000] [--n 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from hearth_process import start_hearth as start_hearth_process  # noqa: E402
from tests.console.console_client import csrf_of  # noqa: E402

from hearth.observability.request_rollups import rebuild_rollups  # noqa: E402
from hearth.store.db import create_engine, migrate  # noqa: E402

DB = "hearth_bench_console"
PG = os.environ.get("HEARTH_BENCH_PG", "postgres@127.0.0.1:5432")
ADMIN_TOKEN = "bench-admin-token-0123456789"
TARGET_P95_MS = 300.0
DAYS = 30
CALLERS = [f"app-{i}" for i in range(8)]
MODELS = ["chat-default", "chat-large", "embed", "summary", "extract"]
ENDPOINTS = [f"ep-{i}" for i in range(8)]
STATUSES = [(200, 0.90), (429, 0.04), (500, 0.02), (502, 0.01), (400, 0.02), (499, 0.01)]
ERROR_CODES = {429: "rate_limited", 500: "upstream_error", 502: "upstream_unavailable", 400: "invalid_request",
               499: "client_closed"}
TASK_STATES = [("succeeded", 0.70), ("failed", 0.08), ("killed", 0.03), ("queued", 0.08), ("waiting", 0.03),
               ("running", 0.02), ("hold", 0.03), ("skipped", 0.01), ("mark_succeeded", 0.02)]
TASK_TYPES = ["capability.summarize", "capability.extract", "document.pipeline", "report.monthly", "bench.echo"]
QUEUES = ["default", "documents", "reports", "low"]
REVIEW_STATES = [("pending", 0.5), ("claimed", 0.1), ("approved", 0.25), ("rejected", 0.1), ("expired", 0.05)]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def weighted(rng: random.Random, table: list[tuple[Any, float]], n: int) -> list[Any]:
    return rng.choices([v for v, _ in table], weights=[w for _, w in table], k=n)


# --------------------------------------------------------------------------- data

async def create_database() -> None:
    conn = await asyncpg.connect(f"postgresql://{PG}/postgres")
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{DB}"')
    finally:
        await conn.close()


async def copy_request_logs(conn: asyncpg.Connection, n: int, now: datetime, rng: random.Random) -> None:
    columns = ["request_id", "created_at", "caller", "route", "model", "endpoint", "upstream_model", "stream", "status",
               "error_code", "attempts", "prompt_tokens", "completion_tokens", "usage_estimated", "cost", "latency_ms",
               "ttft_ms", "end_user", "tenant", "scene", "fallback_used"]
    start = now - timedelta(days=DAYS)
    step = timedelta(days=DAYS) / n
    chunk = 100_000
    for first in range(0, n, chunk):
        count = min(chunk, n - first)
        statuses = weighted(rng, STATUSES, count)
        rows = []
        for j in range(count):
            i = first + j
            status = statuses[j]
            caller = rng.randrange(len(CALLERS))
            m = (caller + rng.choice((0, 0, 1, 2))) % len(MODELS)  # each caller uses mostly one model, a few others
            model = MODELS[m]
            prompt, completion = rng.randrange(20, 4000), (rng.randrange(1, 800) if status == 200 else 0)
            rows.append((f"req-{i:08d}", start + i * step, CALLERS[caller],
                         "chat" if model != "embed" else "embeddings", model, ENDPOINTS[m + rng.randrange(2)],
                         f"up-{model}", rng.random() < 0.4, status, ERROR_CODES.get(status), 1 + (status >= 500),
                         prompt, completion, False, (prompt + 3 * completion) * 1e-6,
                         min(rng.lognormvariate(6.0, 0.8), 120_000.0), None, f"user-{rng.randrange(5000)}",
                         f"tenant-{rng.randrange(40)}", "chat", False))
        await conn.copy_records_to_table("request_logs", records=rows, columns=columns)
        log(f"request logs: {first + count:,}")


async def copy_tasks(conn: asyncpg.Connection, n: int, now: datetime, rng: random.Random) -> None:
    start = now.timestamp() - DAYS * 86_400
    step = DAYS * 86_400 / n
    states = weighted(rng, TASK_STATES, n)
    task_rows, events, attempts, letters = [], [], [], []
    for i in range(n):
        task_id = f"{i:032x}"
        state = states[i]
        created = start + i * step
        started = created + rng.uniform(0.05, 5) if state not in ("queued", "waiting") else None
        finished = (started or created) + rng.uniform(0.5, 60) if state not in ("queued", "waiting", "running",
                                                                                  "hold") else None
        updated = finished or started or created
        caller = CALLERS[i % len(CALLERS)]
        task_type = TASK_TYPES[rng.randrange(len(TASK_TYPES))]
        queue = QUEUES[rng.randrange(len(QUEUES))]
        failed = state == "failed"
        error = json.dumps({"code": "upstream_error", "message": "The upstream failed.", "details": {}}) if failed \
            else None
        task_rows.append((task_id, task_type, queue, 0, state, caller, None, None, caller, i,
                          json.dumps({"text": f"document {i}"}),
                          json.dumps({"summary": "ok"}) if state == "succeeded" else None, error,
                          "upstream_error" if failed else None, "llm" if failed else None, None,
                          100 if finished else 0, 1 if started else 0, 3, True, created, None, None, False, None,
                          None, None, None, None, None, created, started, finished, updated))
        events.append((task_id, created, "state", "queued", 0, None, None, None))
        if started is not None:
            events.append((task_id, started, "state", "running", 1, None, None, None))
            attempts.append((task_id, 1, "worker-1", started, finished,
                             None if finished is None else ("failed" if failed else "succeeded"),
                             "upstream_error" if failed else None, None))
        if finished is not None:
            events.append((task_id, finished, "state", state, 1, None, None, None))
        if failed:
            letters.append((task_id, "OPEN" if rng.random() < 0.8 else "ACKNOWLEDGED",
                            rng.choice(("P1", "P2", "P3")), task_type, queue, caller, "upstream_error", "llm",
                            "The upstream failed.", 3, finished, finished, json.dumps([])))
    await conn.copy_records_to_table("tasks", records=task_rows, columns=[
        "id", "task_type", "queue", "priority", "state", "caller", "tenant", "end_user", "fair_key", "fair_seq",
        "payload", "result", "error", "error_code", "failure_stage", "current_step", "progress", "attempt",
        "max_attempts", "repeat_safe", "run_after", "lease_until", "worker", "cancel_requested", "idempotency_key",
        "replay_of", "callback_url", "request_id", "versions", "hold_reason", "created_at", "started_at",
        "finished_at", "updated_at"])
    await conn.copy_records_to_table("task_events", records=events, columns=[
        "task_id", "at", "kind", "state", "attempt", "progress", "step", "detail"])
    await conn.copy_records_to_table("task_attempts", records=attempts, columns=[
        "task_id", "attempt", "worker", "started_at", "finished_at", "outcome", "error_code", "error_message"])
    await conn.copy_records_to_table("dead_letters", records=letters, columns=[
        "task_id", "status", "severity", "task_type", "queue", "caller", "error_code", "failure_stage", "message",
        "attempts", "opened_at", "updated_at", "history"])
    log(f"tasks: {len(task_rows):,}, events: {len(events):,}, attempts: {len(attempts):,}, "
        f"dead letters: {len(letters):,}")


async def copy_reviews_and_schedules(conn: asyncpg.Connection, n_reviews: int, now: datetime,
                                     rng: random.Random) -> None:
    start = now.timestamp() - DAYS * 86_400
    states = weighted(rng, REVIEW_STATES, n_reviews)
    rows = []
    for i in range(n_reviews):
        created = start + i * DAYS * 86_400 / n_reviews
        state = states[i]
        decided = state in ("approved", "rejected")
        rows.append((f"rv{i:030x}", QUEUES[i % len(QUEUES)], CALLERS[i % len(CALLERS)], "task", f"{i:032x}",
                     f"Check the extraction of document {i}", json.dumps({"total": i}),
                     json.dumps([{"page": 1, "quote": "Total revenue"}]), None, state,
                     "admin" if state == "claimed" else None, created + 900 if state == "claimed" else None, None,
                     "admin" if decided else None, "looks right" if decided else None, json.dumps([]), created,
                     created + 7 * 86_400, created + 60 if decided else None, created + (60 if decided else 0)))
    await conn.copy_records_to_table("review_items", records=rows, columns=[
        "id", "queue", "caller", "subject_kind", "subject_id", "title", "payload", "evidence", "form", "state",
        "assignee", "claim_until", "decision", "decided_by", "reason", "history", "created_at", "expires_at",
        "decided_at", "updated_at"])
    schedules = [(f"sc{i:030x}", f"nightly-{i}", CALLERS[i % len(CALLERS)], f"{i % 60} 2 * * *", "Asia/Shanghai",
                  json.dumps({"task_type": "report.monthly", "payload": {}, "queue": "reports", "priority": 0}),
                  None, None, 0.0, "run_once", 3600.0, "skip", i % 5 == 0, now.timestamp(),
                  now.timestamp() + 3600 * (i % 24), now.timestamp() - 86_400, now.timestamp() - 86_400)
                 for i in range(40)]
    await conn.copy_records_to_table("schedules", records=schedules, columns=[
        "id", "name", "caller", "cron", "time_zone", "target", "start_at", "end_at", "jitter_s", "misfire_policy",
        "catchup_window_s", "overlap_policy", "paused", "planned_through", "next_at", "created_at", "updated_at"])
    log(f"review items: {len(rows):,}, schedules: {len(schedules)}")


async def generate(url: str, n_logs: int, n_tasks: int) -> dict[str, float]:
    timings: dict[str, float] = {}
    await create_database()
    engine = create_engine(url)
    await migrate(engine)
    rng = random.Random(13)
    now = datetime.now(UTC)
    conn = await asyncpg.connect(f"postgresql://{PG}/{DB}")
    try:
        t0 = time.perf_counter()
        await copy_request_logs(conn, n_logs, now, rng)
        timings["copy_request_logs_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        await copy_tasks(conn, n_tasks, now, rng)
        await copy_reviews_and_schedules(conn, max(1, n_tasks // 20), now, rng)
        timings["copy_tasks_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        await conn.execute("VACUUM ANALYZE")  # what autovacuum does after a bulk load (visibility map, statistics)
        timings["vacuum_analyze_s"] = time.perf_counter() - t0
    finally:
        await conn.close()
    t0 = time.perf_counter()
    report = await rebuild_rollups(engine, since=None)
    timings["rollup_rebuild_s"] = time.perf_counter() - t0
    log(f"rollups rebuilt in {timings['rollup_rebuild_s']:.1f} s: {report.rows:,} rows read, written {report.written}")
    conn = await asyncpg.connect(f"postgresql://{PG}/{DB}")
    try:
        for table in ("request_rollups_minute", "request_rollups_hour", "request_rollups_day"):
            await conn.execute(f"VACUUM ANALYZE {table}")
    finally:
        await conn.close()
    await engine.dispose()
    return timings


async def sample_keys(url: str) -> dict[str, Any]:
    """Ids and cursors the targets need: a deep request-log page, a row, a task, a dead letter, a review."""
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        middle = await conn.fetchrow("SELECT id, created_at FROM request_logs ORDER BY created_at DESC, id DESC "
                                     "OFFSET (SELECT count(*) / 2 FROM request_logs) LIMIT 1")
        task = await conn.fetchval("SELECT id FROM tasks WHERE state = 'succeeded' ORDER BY created_at DESC LIMIT 1 "
                                   "OFFSET (SELECT count(*) / 20 FROM tasks)")
        mid_task = await conn.fetchrow("SELECT id, created_at FROM tasks ORDER BY created_at DESC, id DESC LIMIT 1 "
                                       "OFFSET (SELECT count(*) / 2 FROM tasks)")
        letter = await conn.fetchval("SELECT task_id FROM dead_letters ORDER BY opened_at DESC LIMIT 1 OFFSET 100")
        review = await conn.fetchval("SELECT id FROM review_items WHERE state = 'pending' LIMIT 1")
    finally:
        await conn.close()
    import base64

    task_cursor = base64.urlsafe_b64encode(f"{mid_task['created_at']!r}|{mid_task['id']}".encode()).decode().rstrip("=")
    return {"log_id": middle["id"], "log_cursor": f"{middle['created_at'].isoformat()}~{middle['id']}",
            "task": task, "task_cursor": task_cursor, "letter": letter, "review": review}


# --------------------------------------------------------------------------- server and measurement

def start_hearth(tmp: Path, url: str) -> tuple[subprocess.Popen[bytes], str]:
    config = tmp / "hearth.yaml"
    config.write_text(yaml.safe_dump({
        "providers": [{"name": "up", "kind": "openai"}],
        "endpoints": [{"name": e, "provider": "up", "base_url": "http://127.0.0.1:9/v1", "upstream_model": "up",
                       "api_key": "sk-bench-0123456789abcdef"} for e in ENDPOINTS],
        "models": [{"name": m, "endpoints": ENDPOINTS[i:i + 2]} for i, m in enumerate(MODELS)],
        "callers": [{"name": c, "key": f"bench-key-{c}"} for c in CALLERS],
        "budgets": [{"name": f"daily-{c}", "caller": c, "scope": "caller", "period": "day", "unit": "tokens",
                     "limit": 10_000_000} for c in CALLERS]}))
    return start_hearth_process(tmp, {"HEARTH_CONFIG": str(config), "HEARTH_DATABASE_URL": url,
                                      "HEARTH_ADMIN_TOKEN": ADMIN_TOKEN, "HEARTH_OFFLINE_FALLBACK": "false",
                                      "HEARTH_DOCUMENT_DIR": str(tmp / "documents")}, ready_s=120)


def targets(k: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(group, path, is an API call with the admin token) for every page and list API measured."""
    day_ago = quote((datetime.now(UTC) - timedelta(days=1)).isoformat())
    month_ago = quote((datetime.now(UTC) - timedelta(days=29)).isoformat())
    console = [f"/console/overview?window={w}" for w in ("15m", "1h", "6h", "24h", "7d", "30d")] + [
        "/console/endpoints", "/console/request-logs", "/console/request-logs?caller=app-3",
        "/console/request-logs?model=embed", "/console/request-logs?endpoint=ep-5",
        "/console/request-logs?status=502", "/console/request-logs?error_code=client_closed",
        "/console/request-logs?caller=app-1&status=500", "/console/request-logs?status=404",
        "/console/request-logs?caller=app-1&status=404", "/console/request-logs?route=none",
        f"/console/request-logs?cursor={quote(k['log_cursor'])}", f"/console/request-logs/{k['log_id']}",
        "/console/tasks", "/console/tasks?state=failed", "/console/tasks?state=queued", "/console/tasks?state=hold",
        "/console/tasks?task_type=document.pipeline", "/console/tasks?queue=low",
        f"/console/tasks?cursor={k['task_cursor']}", f"/console/tasks/{k['task']}",
        "/console/dead-letters", "/console/dead-letters?status=OPEN", "/console/dead-letters?severity=P1",
        f"/console/dead-letters/{k['letter']}", "/console/reviews", "/console/reviews?state=pending",
        f"/console/reviews/{k['review']}", "/console/prompts", "/console/schedules", "/console/budgets",
        "/console/usage", "/console/usage?window=7d", "/console/usage?window=30d&group_by=model",
        "/console/playground", "/console/quota-groups", "/console/queues", "/console/workflows", "/console/runs",
        "/console/runs?state=running"]
    api = ["/api/v1/request-logs", "/api/v1/request-logs?caller=app-2", "/api/v1/request-logs?status=500",
           "/api/v1/request-logs?status=404", "/api/v1/request-logs?offset=5000",
           "/api/v1/ai/tasks", "/api/v1/ai/tasks?state=failed", f"/api/v1/ai/tasks?updated_since={day_ago}",
           f"/api/v1/ai/tasks?updated_since={month_ago}&limit=500", "/api/v1/ai/tasks?queue=documents",
           "/api/v1/ai/dead-letters", "/api/v1/ai/dead-letters?status=OPEN", "/api/v1/reviews",
           "/api/v1/reviews?state=pending", "/api/v1/schedules", "/api/v1/admin/usage?window=24h",
           "/api/v1/admin/usage?window=30d&group_by=model", "/api/v1/admin/alerts", "/api/v1/ai/callbacks",
           "/api/v1/usage?period=day", "/api/v1/usage?period=month&caller=app-4", "/api/v1/prompts",
           "/api/v1/workflows", "/api/v1/admin/callers", "/api/v1/admin/endpoints", "/api/v1/admin/queues"]
    return [("console", p, False) for p in console] + [("api", p, True) for p in api]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def sign_in(client: httpx.Client) -> None:
    form = client.get("/console/login")
    r = client.post("/console/login", data={"csrf": csrf_of(form.text), "user": "admin", "secret": ADMIN_TOKEN,
                                            "next": "/console/overview"})
    assert r.status_code in (200, 303), r.text


def measure(base: str, keys: dict[str, Any], n: int) -> list[dict[str, Any]]:
    results = []
    with httpx.Client(base_url=base, timeout=60) as browser, \
            httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as api:
        sign_in(browser)
        for group, path, is_api in targets(keys):
            client = api if is_api else browser
            times = []
            status = 0
            for i in range(n + 3):
                t0 = time.perf_counter()
                r = client.get(path)
                elapsed = (time.perf_counter() - t0) * 1000
                status = r.status_code
                if status != 200:
                    raise SystemExit(f"{path} answered {status}: {r.text[:500]}")
                if i >= 3:
                    times.append(elapsed)
            row = {"group": group, "path": path, "p50_ms": round(pct(times, 50), 1), "p95_ms": round(pct(times, 95), 1),
                   "max_ms": round(max(times), 1), "ok": pct(times, 95) <= TARGET_P95_MS}
            log(f"{'ok ' if row['ok'] else 'SLOW'} p50 {row['p50_ms']:7.1f}  p95 {row['p95_ms']:7.1f}  {path}")
            results.append(row)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--logs", type=int, default=1_000_000)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--n", type=int, default=30, help="measured requests per target (after 3 warm-ups)")
    ap.add_argument("--reuse", action="store_true", help="measure the database a previous --keep run left")
    ap.add_argument("--keep", action="store_true", help="keep the database afterwards")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()
    url = f"postgresql+asyncpg://{PG}/{DB}"
    timings: dict[str, float] = {}
    if not args.reuse:
        timings = asyncio.run(generate(url, args.logs, args.tasks))
    keys = asyncio.run(sample_keys(url))
    with tempfile.TemporaryDirectory(prefix="hearth-console-bench-") as tmp:
        proc, base = start_hearth(Path(tmp), url)
        try:
            results = measure(base, keys, args.n)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if not args.keep:
        async def drop() -> None:
            conn = await asyncpg.connect(f"postgresql://{PG}/postgres")
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
            finally:
                await conn.close()
        asyncio.run(drop())
    summary = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.platform(),
               "cpus": os.cpu_count(), "logs": args.logs, "tasks": args.tasks, "n": args.n, "generation": timings,
               "slow": [r["path"] for r in results if not r["ok"]], "results": results}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    print("| target | p50 ms | p95 ms | max ms | ≤ 300 ms p95 |")
    print("|---|---:|---:|---:|:---:|")
    for r in results:
        print(f"| `{r['path']}` | {r['p50_ms']} | {r['p95_ms']} | {r['max_ms']} | {'yes' if r['ok'] else '**no**'} |")
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}, indent=2))


if __name__ == "__main__":
    main()
