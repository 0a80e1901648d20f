"""Enqueue N no-op Celery tasks and time them to the last completion; run by ``bench/task_bench.py`` with the
Python of ``bench/.venv-celery``. Prints one JSON object on stdout.

Timing: ``t0`` is taken just before the first ``apply_async``; the end is the newest ``date_done`` among the
N results (written by the worker, in UTC, when it stored the result — the counterpart of a Hearth task's
``finished_at``), and, as a cross-check, the moment the poll below saw the last result. Completion is polled
every 50 ms by MGET of the oldest still-pending result keys (at most 1,000 per poll: the queue is FIFO), so the
poll costs Redis little while the worker drains.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import datetime

import redis
from celery import group
from celery_tasks import BROKER, app, noop

META = "celery-task-meta-"


def wait_done(r: redis.Redis, ids: list[str], timeout: float, poll_s: float = 0.05) -> float:
    pending = list(ids)
    until = time.time() + timeout
    while pending:
        chunk = pending[:1000]
        values = r.mget([META + i for i in chunk])
        done = 0
        for v in values:
            if v is None:
                break
            done += 1
        pending = pending[done:]
        if done == len(chunk) and pending:
            continue
        if not pending:
            break
        if time.time() > until:
            raise SystemExit(f"celery: {len(pending)} of {len(ids)} tasks not done after {timeout:g} s")
        time.sleep(poll_s)
    return time.time()


def finished(r: redis.Redis, ids: list[str]) -> tuple[float, float, dict[str, int]]:
    """The oldest and newest ``date_done`` of the results, and how many ended in each state."""
    oldest, newest = float("inf"), 0.0
    states: dict[str, int] = {}
    for i in range(0, len(ids), 1000):
        for raw in r.mget([META + t for t in ids[i:i + 1000]]):
            meta = json.loads(raw)
            states[meta["status"]] = states.get(meta["status"], 0) + 1
            done = datetime.fromisoformat(meta["date_done"]).timestamp()
            oldest, newest = min(oldest, done), max(newest, done)
    return oldest, newest, states


def enqueue(n: int, batch: int) -> list[str]:
    ids: list[str] = []
    for i in range(0, n, batch):
        res = group(noop.s() for _ in range(min(batch, n - i))).apply_async()
        ids += [c.id for c in res.results]
    return ids


def run(r: redis.Redis, n: int, batch: int, timeout: float) -> dict[str, object]:
    t0 = time.time()
    ids = enqueue(n, batch)
    t_enqueued = time.time()
    t_seen = wait_done(r, ids, timeout)
    _, t_done, states = finished(r, ids)
    return {"tasks": n, "enqueue_s": t_enqueued - t0, "enqueue_per_s": n / (t_enqueued - t0),
            "elapsed_s": t_done - t0, "per_s": n / (t_done - t0), "wall_s": t_seen - t0,
            "wall_per_s": n / (t_seen - t0), "states": states}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--enqueue-only", action="store_true", help="enqueue (no worker needed), write the ids to a file")
    ap.add_argument("--wait-ids", help="wait for the tasks whose ids the file lists; time their drain")
    args = ap.parse_args()
    r = redis.Redis.from_url(app.conf.result_backend or BROKER)
    if args.enqueue_only:
        t0 = time.time()
        ids = enqueue(args.tasks, args.batch)
        elapsed = time.time() - t0
        with tempfile.NamedTemporaryFile("w", prefix="celery_ids_", suffix=".txt", delete=False) as fh:
            fh.write("\n".join(ids))
        print(json.dumps({"tasks": len(ids), "enqueue_s": elapsed, "enqueue_per_s": len(ids) / elapsed,
                          "ids_file": fh.name}))
        return
    if args.wait_ids:
        with open(args.wait_ids, encoding="utf-8") as fh:
            ids = fh.read().split()
        wait_done(r, ids, args.timeout)
        first, last, states = finished(r, ids)
        print(json.dumps({"tasks": len(ids), "drain_s": last - first, "drain_per_s": len(ids) / (last - first),
                          "states": states}))
        return
    out: dict[str, object] = {}
    if args.warmup:
        out["warmup"] = run(r, args.warmup, args.batch, 60)  # the worker is up, connected, its threads started
    out.update(run(r, args.tasks, args.batch, args.timeout))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
