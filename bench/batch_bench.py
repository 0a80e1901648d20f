"""The Batch API (issue 14): a batch's lines/s against the same calls through ``/v1/chat/completions``.

One Hearth process (``hearth serve``, embedded worker, memory state; SQLite in a temp dir, or ``--database-url``
for PostgreSQL) in front of the fake upstream (in this process's thread, ``--latency-ms``, default 0). Each round
measures, one after the other on the same server:

* **chat**: ``--lines`` chat calls through ``/v1/chat/completions``, ``--concurrency`` at a time (httpx, one
  connection per lane) — wall time from the first send to the last answer;
* **batch**: the same ``--lines`` requests as one batch (``HEARTH_BATCH_CONCURRENCY`` = ``--concurrency``) —
  wall time from ``POST /v1/batches`` to the 20 ms poll that sees ``completed`` (the upload is not counted;
  the output files are, they are part of the batch).

Rounds interleave (chat, batch, chat, batch, …) so both meet the same machine; the report gives the medians and
the per-line difference ``(batch - chat) / lines``: what running a call as a batch line costs beyond the call
itself (the task claim, the input file read, one transaction per recorded answer, the output files).

Usage: ``.venv/bin/python bench/batch_bench.py [--lines 1000] [--concurrency 8] [--rounds 3] [--database-url URL]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from hearth_process import start_hearth

from hearth.testing.fake_upstream import FakeUpstream

KEY = "bench-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}


def _config(path: Path, fake: FakeUpstream) -> Path:
    path.write_text(yaml.safe_dump({
        "providers": [{"name": "fake", "kind": "openai"}],
        "endpoints": [{"name": "fake-1", "provider": "fake", "base_url": fake.base_url, "upstream_model": "fake-chat",
                       "max_concurrency": 1000}],
        "models": [{"name": "bench-chat", "endpoints": ["fake-1"]}],
        "callers": [{"name": "bench", "key": KEY}]}))
    return path


def _body(i: int) -> dict[str, Any]:
    return {"model": "bench-chat", "messages": [{"role": "user", "content": f"Say hello to line {i}, please."}]}


async def _chat_round(base: str, lines: int, concurrency: int) -> float:
    pending = iter(range(lines))

    async def lane() -> None:
        async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=60) as client:
            for i in pending:
                r = await client.post("/v1/chat/completions", json=_body(i))
                assert r.status_code == 200, r.text

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return time.perf_counter() - started


async def _batch_round(base: str, lines: int) -> float:
    data = "\n".join(json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions",
                                 "body": _body(i)}) for i in range(lines)).encode()
    async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=60) as client:
        uploaded = (await client.post("/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"}))
        assert uploaded.status_code == 200, uploaded.text
        started = time.perf_counter()
        created = await client.post("/v1/batches", json={"input_file_id": uploaded.json()["id"],
                                                         "endpoint": "/v1/chat/completions",
                                                         "completion_window": "24h"})
        assert created.status_code == 200, created.text
        while True:
            batch = (await client.get(f"/v1/batches/{created.json()['id']}")).json()
            if batch["status"] not in ("validating", "in_progress", "finalizing"):
                break
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
        assert batch["status"] == "completed" and batch["request_counts"]["completed"] == lines, batch
        return elapsed


def _start_hearth(tmp: Path, config: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    return start_hearth(tmp, {
        "HEARTH_CONFIG": str(config), "HEARTH_DOCUMENT_DIR": str(tmp / "blobs"),
        "HEARTH_DATABASE_URL": args.database_url or f"sqlite+aiosqlite:///{tmp}/hearth.db",
        "HEARTH_BATCH_CONCURRENCY": str(args.concurrency)}, ready_s=30)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    fake = FakeUpstream(latency_ms=args.latency_ms)
    fake.start_in_thread()
    with tempfile.TemporaryDirectory(prefix="hearth-batch-bench-") as raw:
        tmp = Path(raw)
        proc, base = _start_hearth(tmp, _config(tmp / "hearth.yaml", fake), args)
        try:
            await _chat_round(base, 50, args.concurrency)  # warm-up: connections, first queries
            await _batch_round(base, 50)
            chat, batch = [], []
            for _ in range(args.rounds):
                chat.append(await _chat_round(base, args.lines, args.concurrency))
                batch.append(await _batch_round(base, args.lines))
        finally:
            proc.terminate()
            proc.wait(20)
            fake.stop_thread()
    chat_s, batch_s = statistics.median(chat), statistics.median(batch)
    return {"lines": args.lines, "concurrency": args.concurrency, "rounds": args.rounds,
            "database": (args.database_url or "sqlite").split(":", 1)[0], "latency_ms": args.latency_ms,
            "chat_s": chat, "batch_s": batch, "chat_per_s": round(args.lines / chat_s, 1),
            "batch_per_s": round(args.lines / batch_s, 1),
            "per_line_overhead_ms": round((batch_s - chat_s) / args.lines * 1000, 3),
            "machine": f"{platform.node()} {platform.processor() or platform.machine()} cpus={os.cpu_count()}",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--database-url", default=None, help="e.g. postgresql+asyncpg://postgres@127.0.0.1/bench")
    result = asyncio.run(_main(parser.parse_args()))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
