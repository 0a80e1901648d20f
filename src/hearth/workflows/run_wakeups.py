"""Moving a run on as soon as a task of one of its steps ends, instead of at the next scheduler pass.

A run is moved on by passes (:mod:`hearth.workflows.runs`); the scheduler passes over every running run once per
``HEARTH_SCHEDULER_INTERVAL_S``, which bounds how long a step's end can wait before the next step starts — and
so a linear workflow's pace. A worker in this process that writes a task's end tells the :class:`RunWaker`
(:meth:`hearth.tasks.notify.Wakeups.on_ended`), which, a few milliseconds later (gathering the tasks that end
together), passes over just the runs those tasks belong to. Tasks ended elsewhere — another process's worker,
a cancel, the reaper — are noticed by the scheduler's next pass, as before: the waker only shortens the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from hearth.observability.logging import get_logger
from hearth.tasks.notify import Ended
from hearth.workflows.run_steps import run_of_key
from hearth.workflows.runs import RunService

log = get_logger("hearth.workflow_runs")

LINGER_S = 0.005  # gather the tasks that end at about the same time into one pass


class RunWaker:
    def __init__(self, runs: RunService, *, linger_s: float = LINGER_S) -> None:
        self._runs = runs
        self._linger_s = linger_s
        self._runs_ended: set[str] = set()  # runs with a step's task ended since the last pass
        self._news = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    def tasks_ended(self, ends: Sequence[Ended]) -> None:
        """A worker of this process wrote these tasks' ends (called from its loop; never blocks). A task's
        idempotency key names the run whose step submitted it; tasks of no run are no news."""
        runs = {run for run in (run_of_key(e.idempotency_key) for e in ends) if run is not None}
        if runs:
            self._runs_ended.update(runs)
            self._news.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="workflow-run-waker")

    async def _run(self) -> None:
        while not self._stopping:
            await self._news.wait()
            if self._stopping:
                break
            await asyncio.sleep(self._linger_s)
            self._news.clear()
            runs, self._runs_ended = self._runs_ended, set()
            try:
                await self._runs.advance_runs(sorted(runs))
                self.passes += 1
            except Exception as exc:  # the scheduler's next pass decides what this one could not
                log.warning("workflow_run_wake_failed", runs=len(runs), error=type(exc).__name__)

    async def stop(self) -> None:
        """Let the pass in progress end (never cancelled mid-transaction), then stop."""
        self._stopping = True
        self._news.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
