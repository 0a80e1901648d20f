"""Waking workers: in-process events, and PostgreSQL ``LISTEN`` for other processes.

A worker waits for work on an :class:`asyncio.Event` per queue (:class:`Wakeups`); it is set by an
enqueue in the same process, by a notification from another process (``NOTIFY hearth_tasks``, sent
in the enqueueing transaction and so delivered only once the tasks are visible), and by the worker's
own poll timer — the fallback that makes a lost notification (a dropped LISTEN connection, SQLite,
a delayed retry falling due) cost at most one poll interval. Cancellations travel the same way on
``hearth_task_cancel``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

from hearth.observability.logging import get_logger
from hearth.tasks.claim_cursor import ClaimKey
from hearth.tasks.queue import CANCEL_CHANNEL, NOTIFY_CHANNEL, read_notice

log = get_logger("hearth.tasks.notify")


class Ended(NamedTuple):
    """A task whose end a worker has written: its id and idempotency key (a workflow step's names its run)."""

    task_id: str
    idempotency_key: str | None


class Wakeups:
    """Which queues have news, and which tasks were cancelled, for the workers of this process."""

    def __init__(self) -> None:
        self._queues: dict[str, list[asyncio.Event]] = {}
        self._news: dict[asyncio.Event, Callable[[ClaimKey | None], None]] = {}
        self._cancel_hooks: list[Callable[[str], None]] = []
        self._ended_hooks: list[Callable[[Sequence[Ended]], None]] = []

    def subscribe(self, queue: str, *, on_news: Callable[[ClaimKey | None], None] | None = None) -> asyncio.Event:
        """An event set whenever ``queue`` has news; ``on_news`` is told the lowest claim key queued, if known
        (None: unknown, e.g. a retry or a promotion — anything may have become claimable)."""
        event = asyncio.Event()
        self._queues.setdefault(queue, []).append(event)
        if on_news is not None:
            self._news[event] = on_news
        return event

    def unsubscribe(self, queue: str, event: asyncio.Event) -> None:
        self._news.pop(event, None)
        with contextlib.suppress(KeyError, ValueError):
            self._queues[queue].remove(event)

    def poke(self, queue: str, key: ClaimKey | None = None) -> None:
        for event in self._queues.get(queue, ()):
            self._tell(event, key)

    def poke_all(self) -> None:
        for events in self._queues.values():
            for event in events:
                self._tell(event, None)

    def _tell(self, event: asyncio.Event, key: ClaimKey | None) -> None:
        on_news = self._news.get(event)
        if on_news is not None:
            on_news(key)
        event.set()

    def on_cancel(self, hook: Callable[[str], None]) -> None:
        self._cancel_hooks.append(hook)

    def cancelled(self, task_id: str) -> None:
        for hook in self._cancel_hooks:
            hook(task_id)

    def on_ended(self, hook: Callable[[Sequence[Ended]], None]) -> None:
        """Call ``hook`` with the tasks a worker of this process has just written an end for (terminal,
        committed) — e.g. for the workflow engine to start a run's next step at once."""
        self._ended_hooks.append(hook)

    def ended(self, ends: Sequence[Ended]) -> None:
        for hook in self._ended_hooks:
            hook(ends)


def asyncpg_dsn(database_url: str) -> str:
    """The asyncpg form of a SQLAlchemy PostgreSQL URL."""
    scheme, _, rest = database_url.partition("://")
    return "postgresql://" + rest if scheme.startswith("postgresql") else database_url


class PgListener:
    """One LISTEN connection per process, re-established after any loss (a database restart)."""

    def __init__(self, database_url: str, wakeups: Wakeups, *, check_s: float = 2.0) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._wakeups = wakeups
        self._check_s = check_s
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tasks-listen")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _on_queue(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._wakeups.poke(*read_notice(payload))

    def _on_cancel(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._wakeups.cancelled(payload)

    async def _run(self) -> None:
        import asyncpg

        delay = 0.1
        while True:
            conn = None
            try:
                conn = await asyncpg.connect(self._dsn, timeout=5)
                await conn.add_listener(NOTIFY_CHANNEL, self._on_queue)
                await conn.add_listener(CANCEL_CHANNEL, self._on_cancel)
                self.connected.set()
                self._wakeups.poke_all()  # whatever was announced while we were not listening
                delay = 0.1
                while True:
                    await asyncio.sleep(self._check_s)
                    await conn.fetchval("SELECT 1", timeout=5)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.connected.clear()
                log.warning("task_listen_lost", error=type(exc).__name__, retry_in_s=round(delay, 2))
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=1)
