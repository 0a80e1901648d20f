"""The scheduler loop of one process: every ``interval_s``, what time alone makes due — schedule
occurrences (:meth:`ScheduleService.tick`) and review items past their deadline (:meth:`ReviewService.expire_due`).

Any number of processes run one; the occurrence rows and the task engine's idempotency keys make each
occurrence fire once whoever gets there first (see :mod:`hearth.workflows.schedules`), and an item
expires once (a compare-and-set). A failed pass (the database away) is logged and the next one tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

from hearth.observability.logging import get_logger

log = get_logger("hearth.scheduler")


class Scheduler:
    def __init__(self, passes: Sequence[Callable[[], Awaitable[int]]], *, interval_s: float) -> None:
        self.passes_run = tuple(passes)
        self.interval_s = interval_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        self.failed_passes = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="scheduler")

    async def _run(self) -> None:
        while not self._stop.is_set():
            for step in self.passes_run:
                try:
                    await step()
                except Exception as exc:  # the loop never stops; the next pass decides what this one could not
                    self.failed_passes += 1
                    log.warning("scheduler_pass_failed", error=type(exc).__name__)
            self.passes += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)

    async def stop(self) -> None:
        """Let the pass in progress end (never cancelled mid-transaction), then stop."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
