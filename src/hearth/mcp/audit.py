"""The audit of MCP tool calls: one ``mcp_calls`` row per ``tools/call``, allowed or refused.

A row names the caller, the server, the tool, the outcome (with the error code) and the latency. The
arguments are never stored: only the sha256 of their canonical JSON (keys sorted, no whitespace, UTF-8),
so an auditor holding the arguments can prove which call was made without Hearth keeping what may be
personal data or secrets.

Rows go through a bounded in-memory queue written in batches in the background (the hot path makes no
database write), with :func:`hearth.store.batch_insert.insert_isolating`: a row the database refuses goes
to ``dead_rows`` and costs no other caller's row; while the database is unavailable rows wait (the oldest
are dropped beyond the bound, and counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.observability.logging import get_logger
from hearth.store.batch_insert import insert_isolating
from hearth.store.db import stop_writer_task
from hearth.store.tables import mcp_calls

log = get_logger("hearth.mcp.audit")

_MAX_BACKOFF_S = 5.0
_TOOL_CHARS = 256


def argument_digest(arguments: Any) -> str:
    """sha256 hex of the canonical JSON of ``arguments`` (sorted keys, compact)."""
    return hashlib.sha256(orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(slots=True)
class McpCallRecord:
    created_at: float
    request_id: str
    caller: str
    server: str | None
    tool: str
    args_sha256: str
    outcome: str  # ok | tool_error | denied | rate_limited | not_found | upstream_error
    error_code: str | None
    latency_ms: float


class McpAuditWriter:
    def __init__(self, engine: AsyncEngine, *, max_queue: int = 20_000, batch: int = 500,
                 flush_s: float = 0.5) -> None:
        self._engine = engine
        self._queue: deque[McpCallRecord] = deque()
        self._max_queue = max_queue
        self._batch = batch
        self._flush_s = flush_s
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0

    def submit(self, record: McpCallRecord) -> None:
        record.tool = record.tool[:_TOOL_CHARS]
        if len(self._queue) >= self._max_queue:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(record)
        if len(self._queue) >= self._batch:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mcp-audit-writer")

    async def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait() if backoff else self._wake.wait(),
                                       backoff or self._flush_s)
            self._wake.clear()
            backoff = 0.0 if await self.flush() else min(max(2 * backoff, self._flush_s), _MAX_BACKOFF_S)

    async def flush(self) -> bool:
        """Write what is queued; False if the database was unavailable (those rows stay queued)."""
        async with self._lock:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._batch))]
                outcome = await insert_isolating(self._engine, mcp_calls, [asdict(r) for r in batch],
                                                 writer="mcp_audit", row_key="request_id")
                self.written += outcome.written
                if outcome.retry:
                    keep = [McpCallRecord(**row) for row in outcome.retry]
                    self._queue.extendleft(reversed(keep))
                    while len(self._queue) > self._max_queue:
                        self._queue.popleft()
                        self.dropped += 1
                    return False
            return True

    async def stop(self) -> None:
        if self._task is not None:
            self._stop.set()
            self._wake.set()
            await stop_writer_task(self._task)
            self._task = None
        if not await self.flush():
            log.error("mcp_audit_rows_not_written", rows=len(self._queue))
