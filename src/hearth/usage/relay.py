"""The relay: delivers the usage outbox to its sinks, one loop per sink, in every process that runs the scheduler.

Each round a sink's loop claims up to ``batch`` due rows of its own (leased; see
:mod:`hearth.observability.usage_outbox`), sends them within ``timeout_s`` and records each row's outcome:
delivered, or pending again after a jittered exponential backoff (``interval_s`` doubling up to
``max_backoff_s``) with the error kept. A sink that is down only holds back its own rows, and its loop
itself backs off the same way instead of claiming row after row that would fail. A full round is followed
at once by the next; otherwise the loop waits ``interval_s``.

Leaderless: any number of processes relay at once; a row is claimed by one at a time, and a row whose
relay died is claimed again when its lease ends (a relay that is stopped mid-round gives its rows back at once)
— so an event may reach a sink twice, with the same id.
Delivered rows are deleted after ``retention_s`` (in bounded chunks, about once a minute).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.observability.logging import get_logger
from hearth.observability.usage_outbox import claim_due, delete_delivered, mark_delivered, mark_failed, release
from hearth.tasks.retry import jittered_backoff_s
from hearth.usage.sinks import UsageSink

log = get_logger("hearth.usage.relay")

_CLEANUP_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class RelayPolicy:
    batch: int = 100
    interval_s: float = 1.0
    max_backoff_s: float = 60.0
    timeout_s: float = 10.0
    retention_s: float = 86_400.0

    @property
    def lease_s(self) -> float:
        """Longer than a round can take, so a live relay's rows are never claimed by another."""
        return 2 * self.timeout_s + 30.0


@dataclass(frozen=True, slots=True)
class Round:
    sent: int
    failed: int


class UsageRelay:
    def __init__(self, engine: AsyncEngine, sinks: Sequence[UsageSink], policy: RelayPolicy, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._engine = engine
        self.sinks = tuple(sinks)
        self._policy = policy
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []
        self.delivered = {s.name: 0 for s in self.sinks}
        self.failures = {s.name: 0 for s in self.sinks}
        self.last_error: dict[str, str | None] = {s.name: None for s in self.sinks}

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(sink), name=f"usage-relay-{sink.name}") for sink in self.sinks]
        self._tasks.append(asyncio.create_task(self._clean(), name="usage-outbox-cleanup"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for sink in self.sinks:
            await sink.close()

    def _retry_in_s(self, attempts: int) -> float:
        return jittered_backoff_s(attempts, base_s=self._policy.interval_s, max_s=self._policy.max_backoff_s)

    async def relay_once(self, sink: UsageSink) -> Round:
        """One round for ``sink``: claim what is due, send it, record each row's outcome."""
        policy = self._policy
        rows = await claim_due(self._engine, sink.name, now=self._clock.now(), limit=policy.batch,
                               lease_s=policy.lease_s)
        if not rows:
            return Round(0, 0)
        try:
            outcomes = await asyncio.wait_for(sink.send(rows), policy.timeout_s)
        except TimeoutError:
            outcomes = ["timeout"] * len(rows)
        except asyncio.CancelledError:  # stopping: the rows are owed again now, not when the lease ends
            with contextlib.suppress(Exception):
                await asyncio.shield(release(self._engine, [row.id for row in rows]))
            raise
        now = self._clock.now()
        done = [row.id for row, outcome in zip(rows, outcomes, strict=True) if outcome is None]
        failed = [(row, outcome) for row, outcome in zip(rows, outcomes, strict=True) if outcome is not None]
        await mark_delivered(self._engine, done, now=now)
        await mark_failed(self._engine, failed, now=now, retry_in_s=self._retry_in_s)
        self.delivered[sink.name] += len(done)
        if failed:
            self.failures[sink.name] += len(failed)
            self.last_error[sink.name] = failed[0][1]
            log.warning("usage_events_not_delivered", sink=sink.name, events=len(failed), error=failed[0][1])
        return Round(len(rows), len(failed))

    async def _run(self, sink: UsageSink) -> None:
        policy = self._policy
        failures = 0
        while True:
            try:
                result = await self.relay_once(sink)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away: the rows stay where they are
                log.warning("usage_relay_round_failed", sink=sink.name, error=type(exc).__name__)
                result = Round(0, 1)
            if result.failed:
                failures += 1
                await asyncio.sleep(self._retry_in_s(failures))
            else:
                failures = 0
                if result.sent < policy.batch:
                    await asyncio.sleep(policy.interval_s)

    async def cleanup(self) -> int:
        """Delete delivered rows older than the retention; how many."""
        before = self._clock.now() - self._policy.retention_s
        total = 0
        while (deleted := await delete_delivered(self._engine, before=before)) > 0:
            total += deleted
        return total

    async def _clean(self) -> None:
        while True:
            try:
                deleted = await self.cleanup()
                if deleted:
                    log.info("usage_outbox_cleaned", rows=deleted)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("usage_outbox_cleanup_failed", error=type(exc).__name__)
            await asyncio.sleep(_CLEANUP_EVERY_S)

    def stats(self) -> dict[str, dict[str, int | str | None]]:
        return {s.name: {"delivered": self.delivered[s.name], "failures": self.failures[s.name],
                         "last_error": self.last_error[s.name]} for s in self.sinks}
