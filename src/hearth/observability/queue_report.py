"""The task queues at a glance: per queue, tasks queued, waiting and running, how long the oldest queued task has
been due, and the concurrency each worker process runs it with — for ``GET /api/v1/admin/queues`` and the
console's queues page.

The figures are the metrics collector's task counts (:func:`hearth.observability.metrics_queries.queue_counts`,
the queue part of ``live_counts``): one query per live state through that state's partial index, so the report
costs the same with a million finished tasks as with none. Finished tasks, and tasks on hold for a human (the
review queue shows those), are not counted. A queue that is not configured in ``task_queues`` is summed under
``other``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.observability.metrics_queries import queue_counts


async def queue_report(engine: AsyncEngine, configured: Mapping[str, int], *, now: float) -> list[dict[str, Any]]:
    """Every configured queue (idle ones too) and ``other`` if tasks sit on queues not configured, by name."""
    counts = await queue_counts(engine, configured, now=now)
    return [{"queue": name, "queued": f.queued, "waiting": f.waiting, "running": f.running,
             "oldest_queued_s": round(max(0.0, f.oldest_due_s), 3), "concurrency": configured.get(name)}
            for name, f in sorted(counts.items())]
