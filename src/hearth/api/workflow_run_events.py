"""A workflow run's changes as Server-Sent Events, read from the database until the run ends.

Each event goes out as ``id: <n>`` / ``event: snapshot|action|step|run`` / ``data: <json>`` (see
:mod:`hearth.workflows.run_events`). The stream reads the run every :data:`POLL_S` and sends what changed, a
``: heartbeat`` comment after ``heartbeat_s`` of silence, and ends after a terminal ``run`` event — or right
after the snapshot when the run had already ended. Ids count up on one connection; a client reconnecting with
``Last-Event-ID: n`` gets ids from ``n + 1``, starting with a fresh snapshot (the run's rows are the truth:
there is no log of every transition to replay). The sleep and the time source are injectable, so tests need
not wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson

from hearth.workflows.run_actions import RunActions
from hearth.workflows.run_events import RunEvent, changes, is_terminal, snapshot

POLL_S = 0.5


class RunEventFrames:
    def __init__(self, actions: RunActions, run_id: str, *, after: int, heartbeat_s: float, poll_s: float = POLL_S,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._actions = actions
        self._run_id = run_id
        self._next_id = after + 1
        self._heartbeat_s = heartbeat_s
        self._poll_s = poll_s
        self._sleep = sleep
        self._monotonic = monotonic

    def _frame(self, event: RunEvent) -> bytes:
        frame = f"id: {self._next_id}\nevent: {event.kind}\n".encode() + b"data: " + orjson.dumps(
            event.data, option=orjson.OPT_NON_STR_KEYS) + b"\n\n"
        self._next_id += 1
        return frame

    async def frames(self) -> AsyncIterator[bytes]:
        view = await self._actions.view(self._run_id)
        yield self._frame(snapshot(view))
        quiet_since = self._monotonic()
        while not is_terminal(view):
            await self._sleep(self._poll_s)
            now = await self._actions.view(self._run_id)
            events = changes(view, now)
            view = now
            for event in events:
                yield self._frame(event)
            if events:
                quiet_since = self._monotonic()
            elif self._monotonic() - quiet_since >= self._heartbeat_s:
                quiet_since = self._monotonic()
                yield b": heartbeat\n\n"

    async def close(self) -> None:
        return None
