"""Request logs: one record per gateway call, persisted by a bounded asynchronous batch writer.

The hot path only appends to an in-memory queue (no database write per request). A background
task flushes batches every ``flush_s`` or when ``batch`` records are waiting. When the queue is full
the record is dropped and counted (``dropped``), so overload degrades logging, never latency.
This module owns the ``request_logs`` table.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.observability.logging import get_logger
from hearth.store.db import stop_writer_task
from hearth.store.tables import request_logs

log = get_logger("hearth.request_log")


@dataclass(slots=True)
class RequestLogRecord:
    request_id: str
    created_at: datetime
    caller: str | None
    route: str
    model: str | None
    endpoint: str | None
    upstream_model: str | None
    stream: bool
    status: int
    error_code: str | None
    attempts: int
    prompt_tokens: int
    completion_tokens: int
    usage_estimated: bool
    cost: float
    latency_ms: float
    ttft_ms: float | None
    end_user: str | None
    tenant: str | None = None
    client_ip: str | None = None
    scene: str | None = None
    fallback_used: bool = False
    attempted_models: list[str] | None = None
    effective_max_tokens: int | None = None
    estimated_cost: float | None = None


_FIELDS = tuple(f.name for f in fields(RequestLogRecord))


def _row(record: RequestLogRecord) -> dict[str, Any]:
    # A shallow copy: dataclasses.asdict() deep-copies every value and was a hot spot.
    return {name: getattr(record, name) for name in _FIELDS}


class RequestLogWriter:
    def __init__(self, engine: AsyncEngine, max_queue: int = 20_000, batch: int = 500, flush_s: float = 0.5) -> None:
        self._engine = engine
        self._queue: deque[RequestLogRecord] = deque()
        self._max_queue = max_queue
        self._batch = batch
        self._flush_s = flush_s
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0
        self.failed_batches = 0

    def submit(self, record: RequestLogRecord) -> None:
        if len(self._queue) >= self._max_queue:
            self.dropped += 1
            return
        self._queue.append(record)
        if len(self._queue) >= self._batch:
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="request-log-writer")

    async def _run(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._flush_s)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        while self._queue:
            n = min(len(self._queue), self._batch)
            rows = [_row(self._queue.popleft()) for _ in range(n)]
            try:
                async with self._engine.begin() as conn:
                    await conn.execute(request_logs.insert(), rows)
                self.written += n
            except Exception as exc:  # the database may be briefly unavailable; count and go on
                self.failed_batches += 1
                self.dropped += n
                log.error("request_log_batch_failed", rows=n, error=type(exc).__name__)
                return

    async def stop(self) -> None:
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            await stop_writer_task(self._task)
            self._task = None
        await self.flush()

    def stats(self) -> dict[str, int]:
        return {"written": self.written, "dropped": self.dropped, "pending": len(self._queue),
                "failed_batches": self.failed_batches}


_FILTERS = ("caller", "model", "endpoint", "status", "error_code", "request_id", "route", "end_user", "tenant",
            "scene")


async def query_request_logs(engine: AsyncEngine, filters: dict[str, Any], since: datetime | None,
                             until: datetime | None, limit: int, offset: int) -> tuple[int, list[dict[str, Any]]]:
    conds = [request_logs.c[k] == v for k, v in filters.items() if k in _FILTERS and v is not None]
    if since is not None:
        conds.append(request_logs.c.created_at >= since)
    if until is not None:
        conds.append(request_logs.c.created_at < until)
    async with engine.connect() as conn:
        total = (await conn.execute(select(func.count()).select_from(request_logs).where(*conds))).scalar_one()
        rows = (await conn.execute(select(request_logs).where(*conds)
                                   .order_by(request_logs.c.id.desc()).limit(limit).offset(offset))).mappings().all()
    out = []
    for r in rows:
        d = dict(r)
        created = d["created_at"]
        if isinstance(created, datetime):
            if created.tzinfo is None:
                created = created.replace(tzinfo=UTC)
            d["created_at"] = created.isoformat()
        out.append(d)
    return total, out


async def usage_summary(engine: AsyncEngine, since: datetime | None, caller: str | None, tenant: str | None,
                        user: str | None) -> dict[str, Any]:
    """Totals over request logs: requests, errors, tokens and cost, optionally per caller/tenant/user."""
    t = request_logs
    conds = []
    if since is not None:
        conds.append(t.c.created_at >= since)
    for column, value in ((t.c.caller, caller), (t.c.tenant, tenant), (t.c.end_user, user)):
        if value is not None:
            conds.append(column == value)
    stmt = select(func.count(), func.sum(case((t.c.status >= 400, 1), else_=0)),
                  func.coalesce(func.sum(t.c.prompt_tokens), 0), func.coalesce(func.sum(t.c.completion_tokens), 0),
                  func.coalesce(func.sum(t.c.cost), 0.0)).where(*conds)
    async with engine.connect() as conn:
        requests, errors, prompt, completion, cost = (await conn.execute(stmt)).one()
    return {"requests": int(requests or 0), "errors": int(errors or 0), "prompt_tokens": int(prompt),
            "completion_tokens": int(completion), "total_tokens": int(prompt) + int(completion),
            "cost": float(cost)}
