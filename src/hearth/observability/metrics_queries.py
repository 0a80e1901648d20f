"""The database side of the cluster gauges: read-only aggregates over live rows, each served by an index.

Only rows in a live state are counted (queued, waiting and running tasks; open dead letters; pending
callbacks; running and paused workflow runs; waiting review items) — each through the partial or
state-leading index of its table, so a scrape costs the same with a million finished tasks as with
none. Terminal states grow without bound and are not counted here (the console's pages and the
request-log rollups show history). Called by the metrics collector at most once per cache period.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.store.tables import callback_deliveries, dead_letters, review_items, tasks, workflow_runs

OTHER = "other"


@dataclass(slots=True)
class QueueFigures:
    queued: int = 0
    waiting: int = 0
    running: int = 0
    oldest_due_s: float = 0.0  # how long the longest-waiting due queued task has been due


@dataclass(slots=True)
class LiveCounts:
    queues: dict[str, QueueFigures] = field(default_factory=dict)
    dead_letters_open: dict[str, int] = field(default_factory=dict)  # severity → open letters
    callbacks: dict[str, int] = field(default_factory=dict)  # pending | delivering → deliveries
    workflow_runs: dict[str, int] = field(default_factory=dict)  # running | paused → runs
    reviews_waiting: dict[str, int] = field(default_factory=dict)  # pending | claimed → items
    review_oldest_s: float = 0.0  # age of the oldest waiting review item
    round_trip_s: float = 0.0  # one `SELECT 1`


async def live_counts(engine: AsyncEngine, configured_queues: Mapping[str, Any], *, now: float) -> LiveCounts:
    """Every figure in one connection; queues that are not configured are summed under ``other``."""
    out = LiveCounts()
    async with engine.connect() as conn:
        started = time.perf_counter()
        await conn.execute(text("SELECT 1"))
        out.round_trip_s = time.perf_counter() - started
        for name in configured_queues:
            out.queues[name] = QueueFigures()
        await _task_counts(conn, out, configured_queues, now=now)
        rows = await conn.execute(select(dead_letters.c.severity, func.count())
                                  .where(dead_letters.c.status == "OPEN").group_by(dead_letters.c.severity))
        out.dead_letters_open = {str(sev): int(n) for sev, n in rows.all()}
        rows = await conn.execute(select(callback_deliveries.c.state, func.count())
                                  .where(callback_deliveries.c.state.in_(("pending", "delivering")))
                                  .group_by(callback_deliveries.c.state))
        out.callbacks = {"pending": 0, "delivering": 0} | {str(s): int(n) for s, n in rows.all()}
        rows = await conn.execute(select(workflow_runs.c.state, func.count())
                                  .where(workflow_runs.c.state.in_(("running", "paused")))
                                  .group_by(workflow_runs.c.state))
        out.workflow_runs = {"running": 0, "paused": 0} | {str(s): int(n) for s, n in rows.all()}
        rows = await conn.execute(select(review_items.c.state, func.count(), func.min(review_items.c.created_at))
                                  .where(review_items.c.state.in_(("pending", "claimed")))
                                  .group_by(review_items.c.state))
        out.reviews_waiting = {"pending": 0, "claimed": 0}
        oldest: float | None = None
        for state, n, first in rows.all():
            out.reviews_waiting[str(state)] = int(n)
            if first is not None:
                oldest = first if oldest is None else min(oldest, first)
        out.review_oldest_s = max(0.0, now - oldest) if oldest is not None else 0.0
    return out


async def _task_counts(conn: AsyncConnection, out: LiveCounts, configured: Mapping[str, Any], *, now: float) -> None:
    """One query per live state, each matching that state's partial index."""
    def figures(queue: str) -> QueueFigures:
        name = queue if queue in configured else OTHER
        found = out.queues.get(name)
        if found is None:
            found = out.queues[name] = QueueFigures()
        return found

    c = tasks.c
    rows = await conn.execute(select(c.queue, func.count(), func.min(c.run_after))
                              .where(c.state == "queued").group_by(c.queue))
    for queue, n, first_due in rows.all():
        f = figures(queue)
        f.queued += int(n)
        if first_due is not None:
            f.oldest_due_s = max(f.oldest_due_s, now - float(first_due))
    for state in ("waiting", "running"):
        rows = await conn.execute(select(c.queue, func.count()).where(c.state == state).group_by(c.queue))
        for queue, n in rows.all():
            f = figures(queue)
            setattr(f, state, getattr(f, state) + int(n))


async def queue_counts(engine: AsyncEngine, configured_queues: Mapping[str, Any], *,
                       now: float) -> dict[str, QueueFigures]:
    """Only the task queues' figures of :func:`live_counts` (the same queries), for the admin queues report: the
    other live counts cost queries that report does not show."""
    out = LiveCounts(queues={name: QueueFigures() for name in configured_queues})
    async with engine.connect() as conn:
        await _task_counts(conn, out, configured_queues, now=now)
    return out.queues
