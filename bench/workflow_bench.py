"""Workflow runs on PostgreSQL with one worker process (issue 11): how many steps per second the run engine moves.

A linear workflow of ``--steps`` task steps (each a ``test.noop`` task, the engine's cost alone) is registered
on a fresh database; ONE ``hearth worker -q bench --concurrency C`` OS process (Redis state backend, scheduler
on, as deployed) is started and warmed up with a few runs; then ``--runs`` runs are inserted in one transaction
(as ``POST /api/v1/workflows/{name}/runs`` would insert each: the run row and its steps ``waiting``) and the
worker alone moves them to the end — it notices new and moved runs, submits each step's task, runs it, and
checkpoints the step.

Steps/s = runs × steps / (max(``finished_at``) − min(``created_at``)) over the measured runs (both written on
this machine); the wall time until a 50 ms poll saw every run ended is the cross-check. Also: each run's
duration (p50 / p99), the worker's and PostgreSQL's CPU seconds per 1,000 steps, and what the rest of the
machine used meanwhile (its noise). ``--repeat R`` measures R batches on the same worker and database.

Usage::

    .venv/bin/python bench/workflow_bench.py                       # 1,000 runs x 5 steps, 3 rounds
    .venv/bin/python bench/workflow_bench.py --runs 200 --repeat 1 # a quick look

Only 127.0.0.1 is contacted; the database is dropped and the Redis keys deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from task_bench import RESULTS, CpuMeter, HearthWorker, Started, machine, pct, pg_database

from hearth.ids import new_id
from hearth.workflows import run_store
from hearth.workflows.definition_store import DefinitionStore

TARGET_STEPS_PER_S = 1000
NAME = "bench-linear"


def definition(steps: int) -> dict[str, Any]:
    return {"name": NAME, "steps": [
        {"id": f"s{i}", "kind": "task", "task_type": "test.noop", "input": {"i": i},
         **({"needs": [f"s{i - 1}"]} if i else {})} for i in range(steps)]}


async def insert_runs(engine: AsyncEngine, *, n: int, steps: int, version: int, caller: str) -> float:
    """n runs in one transaction; the time.time() taken before it."""
    now = time.time()
    new = [run_store.NewRun(id="wfr_" + new_id(), workflow=NAME, version=version, caller=caller, input={"n": i},
                            step_ids=[f"s{j}" for j in range(steps)]) for i in range(n)]
    async with engine.begin() as conn:
        await run_store.insert_runs(conn, new, now=now)
    return now


async def wait_runs(engine: AsyncEngine, caller: str, n: int, timeout_s: float) -> float:
    sql = text("SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state NOT IN "
               "('running', 'succeeded')) FROM workflow_runs WHERE caller = :c")
    until = time.monotonic() + timeout_s
    while True:
        async with engine.connect() as conn:
            ok, bad = (await conn.execute(sql, {"c": caller})).one()
        if bad:
            raise SystemExit(f"{bad} of {caller}'s runs ended other than succeeded")
        if ok >= n:
            return time.time()
        if time.monotonic() > until:
            raise SystemExit(f"{caller}: only {ok} of {n} runs succeeded after {timeout_s:g} s")
        await asyncio.sleep(0.05)


async def one_batch(engine: AsyncEngine, worker: HearthWorker, *, runs: int, steps: int, version: int,
                    caller: str, timeout_s: float) -> dict[str, Any]:
    meter = CpuMeter(worker.pid)
    meter.start()
    t0 = await insert_runs(engine, n=runs, steps=steps, version=version, caller=caller)
    seen = await wait_runs(engine, caller, runs, timeout_s)
    cpu = meter.stop(runs * steps)
    async with engine.connect() as conn:
        first, last = (await conn.execute(text("SELECT min(created_at), max(finished_at) FROM workflow_runs "
                                               "WHERE caller = :c"), {"c": caller})).one()
        took = sorted((await conn.execute(text("SELECT finished_at - created_at FROM workflow_runs "
                                               "WHERE caller = :c"), {"c": caller})).scalars().all())
        tasks = (await conn.execute(text("SELECT count(*) FROM tasks WHERE caller = :c AND state = 'succeeded'"),
                                    {"c": caller})).scalar_one()
    if tasks != runs * steps:
        raise SystemExit(f"{tasks} tasks succeeded, expected {runs * steps}: a step ran twice or not at all")
    span = float(last) - float(first)
    return {"steps_per_s": round(runs * steps / span, 1), "wall_steps_per_s": round(runs * steps / (seen - t0), 1),
            "span_s": round(span, 3), "run_p50_s": round(pct(took, 50), 3), "run_p99_s": round(pct(took, 99), 3),
            **{k.replace("_per_1k", "_per_1k_steps"): v for k, v in cpu.items()}}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    ts = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    res: dict[str, Any] = {"run": ts, "command": " ".join(["python", *sys.argv]),
                           "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
                           "args": vars(args), "rounds": []}
    async with pg_database("wf") as (url, engine):
        store = DefinitionStore(engine)
        row, _ = await store.register(definition(args.steps), known_task_types={"test.noop"})
        version = int(row["version"])
        worker = HearthWorker(url, args.concurrency, RESULTS / f"workflow-{ts}-worker.log")
        try:
            await worker.ready()
            await one_batch(engine, worker, runs=20, steps=args.steps, version=version, caller="warmup",
                            timeout_s=60)
            for r in range(args.repeat):
                out = await one_batch(engine, worker, runs=args.runs, steps=args.steps, version=version,
                                      caller=f"bench{r}", timeout_s=args.timeout)
                print(f"  round {r + 1}: {json.dumps(out)}", flush=True)
                res["rounds"].append(out)
        finally:
            worker.stop()
            Started.clean_up()
    rates = sorted(r["steps_per_s"] for r in res["rounds"])
    res["median_steps_per_s"] = rates[len(rates) // 2]
    res["target_met"] = res["median_steps_per_s"] >= TARGET_STEPS_PER_S
    res["machine"]["loadavg_end"] = os.getloadavg()
    (RESULTS / f"workflow-{ts}.json").write_text(json.dumps(res, indent=2, default=str))
    print(f"\nrun {ts}: {args.runs} runs x {args.steps} steps, median {res['median_steps_per_s']} steps/s "
          f"(target {TARGET_STEPS_PER_S}: {'met' if res['target_met'] else 'NOT met'})\n"
          f"bench/results/workflow-{ts}.json")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64, help="the worker's task slots")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a round may take before it is abandoned")
    args = ap.parse_args()
    try:
        asyncio.run(run(args))
    finally:
        Started.clean_up()


if __name__ == "__main__":
    main()
