"""A bounded queue of rows for one table, written in batches by a background task, off the hot path.

The usage-event outbox and the MCP audit both need what the request-log writer gives its rows: a caller
queues a row and returns at once; a task inserts the queue in batches (:func:`insert_isolating`: one row
the database refuses is dead-lettered without costing the others); while the database is unavailable
the rows stay queued and are retried with a backoff; when the queue is full the oldest rows are dropped
and counted. :class:`QueuedRows` is that, once. Its owner queues rows with :meth:`QueuedRows.put`, starts
it with the process and stops it (a last flush) when the process stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.observability.logging import get_logger
from hearth.store.batch_insert import OneHop, insert_isolating
from hearth.store.db import stop_writer_task

log = get_logger("hearth.queued_rows")
MAX_BACKOFF_S = 5.0


class QueuedRows:
    """Rows for ``table`` queued in memory (at most ``max_rows``) and inserted ``batch`` at a time, at least
    every ``flush_s`` (at once when a batch is full). ``name`` names the writer in logs and ``dead_rows``;
    ``row_key`` is the column that identifies a row there."""

    def __init__(self, engine: AsyncEngine, table: Table, *, name: str, row_key: str, max_rows: int = 20_000,
                 batch: int = 500, flush_s: float = 0.5) -> None:
        self._engine = engine
        self._table = table
        self.name = name
        self._row_key = row_key
        self._queue: deque[dict[str, Any]] = deque()
        self._max_rows = max_rows
        self._batch = batch
        self._flush_s = flush_s
        self._one_hop = OneHop.for_engine(engine)  # a SQLite file: each batch in one hop (keeps the write lane short)
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.written = 0  # committed into the table
        self.dropped = 0  # dropped because the queue was full
        self.dead = 0  # refused by the database, recorded in dead_rows
        self.lost = 0  # refused, and recording them failed too
        self.failed_batches = 0  # batches handed back because the database was unavailable
        self.last_error: str | None = None

    @property
    def pending(self) -> int:
        return len(self._queue)

    def put(self, rows: Iterable[dict[str, Any]]) -> None:
        """Queue ``rows`` (never waits; the oldest are dropped beyond ``max_rows``)."""
        self._queue.extend(rows)
        self._trim()
        if len(self._queue) >= self._batch:
            self._wake.set()

    def _trim(self) -> None:
        overflow = len(self._queue) - self._max_rows
        for _ in range(overflow):
            self._queue.popleft()
        self.dropped += max(overflow, 0)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"{self.name}-writer")

    async def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                if backoff:
                    await asyncio.wait_for(self._stop.wait(), backoff)
                else:
                    await asyncio.wait_for(self._wake.wait(), self._flush_s)
            self._wake.clear()
            backoff = 0.0 if await self.flush() else min(max(2 * backoff, self._flush_s), MAX_BACKOFF_S)

    async def flush(self) -> bool:
        """Write what is queued; False if the database was unavailable (the unwritten rows stay queued)."""
        async with self._lock:
            queue = self._queue
            while queue:
                rows = [queue.popleft() for _ in range(min(len(queue), self._batch))]
                outcome = await insert_isolating(self._engine, self._table, rows, writer=self.name,
                                                 row_key=self._row_key, one_hop=self._one_hop)
                self.written += outcome.written
                self.dead += outcome.dead
                self.lost += outcome.lost
                if outcome.error is not None:
                    self.last_error = outcome.error
                if outcome.retry:
                    self.failed_batches += 1
                    queue.extendleft(reversed(outcome.retry))
                    self._trim()
                    return False
            return True

    async def stop(self) -> None:
        """Stop the loop and write what is left (logged if the database is still unavailable)."""
        if self._task is not None:
            self._stop.set()
            self._wake.set()
            await stop_writer_task(self._task)
            self._task = None
        if not await self.flush():
            log.error("queued_rows_not_written", writer=self.name, rows=len(self._queue), error=self.last_error)
        if self._one_hop is not None:
            await self._one_hop.close()

    def stats(self) -> dict[str, int | str | None]:
        return {"written": self.written, "dropped": self.dropped, "dead": self.dead, "lost": self.lost,
                "pending": len(self._queue), "failed_batches": self.failed_batches, "last_error": self.last_error,
                "one_hop_batches": self._one_hop.batches if self._one_hop is not None else 0}
