"""A task's events as Server-Sent Events, read from the database until the task ends.

Each event goes out as ``id: <event id>`` / ``event: state|progress`` / ``data: <json>``, so a client that
reconnects with ``Last-Event-ID`` continues after the last one it saw. The stream polls the task's events
(an index range) every :data:`POLL_S`, sends a ``: heartbeat`` comment after ``heartbeat_s`` of silence and
ends after the event of a terminal state — or at once, when the task had already ended before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson

from hearth.tasks.service import TaskService
from hearth.tasks.states import TERMINAL
from hearth.tasks.views import event_view

POLL_S = 0.25


class TaskEventFrames:
    def __init__(self, service: TaskService, task_id: str, *, after: int, heartbeat_s: float) -> None:
        self._service = service
        self._task_id = task_id
        self._after = after
        self._heartbeat_s = heartbeat_s

    async def frames(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            events = await self._service.events(self._task_id, after_id=self._after)
            for e in events:
                self._after = e["id"]
                yield (f"id: {e['id']}\nevent: {e['kind']}\n".encode()
                       + b"data: " + orjson.dumps(event_view(e)) + b"\n\n")
                if e["kind"] == "state" and e["state"] in TERMINAL:
                    return
            if events:
                quiet_since = loop.time()
            elif not await self._still_open():
                return
            elif loop.time() - quiet_since >= self._heartbeat_s:
                quiet_since = loop.time()
                yield b": heartbeat\n\n"
            await asyncio.sleep(POLL_S)

    async def _still_open(self) -> bool:
        """False once the task is terminal and every event up to that was sent (a resumed stream of a
        finished task whose last event the client already had)."""
        row = await self._service.get(self._task_id, caller=None)
        if row["state"] not in TERMINAL:
            return True
        return bool(await self._service.events(self._task_id, after_id=self._after, limit=1))

    async def close(self) -> None:
        return None
