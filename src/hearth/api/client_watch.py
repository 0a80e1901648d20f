"""Noticing that an HTTP client went away, and dropping a connection that no longer drains.

ASGI tells an application that its client left only through ``receive()``: once the request body
has been delivered, the next ``receive()`` returns ``http.disconnect`` when the connection is lost.
:class:`ClientWatch` stands in for the server's ``receive``: it hands the body through untouched,
and the moment the last body message has been delivered it keeps one ``receive()`` pending in a
single task — the only extra task of a request, created only once the body is read. When that
``receive()`` answers ``http.disconnect`` it calls the current callback (the hot path cancels the
handler; :class:`~hearth.api.event_stream.EventStreamResponse` ends its stream). Later callers of
:meth:`ClientWatch.receive` share the watcher's answer instead of racing it for the next message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import Message, Receive

__all__ = ["ClientWatch", "abort_connection"]


class ClientWatch:
    __slots__ = ("_on_leave", "_receive", "_watcher", "left")

    def __init__(self, receive: Receive, on_leave: Callable[[], object] | None = None) -> None:
        self._receive = receive
        self._on_leave = on_leave
        self._watcher: asyncio.Task[Message] | None = None
        self.left = False  # the client is gone (True only before the response completed)

    async def receive(self) -> Message:
        watcher = self._watcher
        if watcher is not None:
            # After the body, the only message left is http.disconnect: wait for the watcher's.
            return await asyncio.shield(watcher)
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.left = True
        elif not message.get("more_body", False):
            self._start()
        return message

    def on_disconnect(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback`` (instead of the previous one, ``None`` for nothing) when the client leaves;
        at once if it already has. Watching starts now if the body was never read (it is discarded)."""
        self._on_leave = callback
        if callback is not None and self.left:
            callback()
        elif self._watcher is None and not self.left:
            self._start()

    def close(self) -> None:
        """Stop watching (the response is over)."""
        watcher = self._watcher
        if watcher is not None and not watcher.done():
            watcher.cancel()

    @property
    def transport(self) -> Any:
        """The server's transport for this request when the server exposes it (uvicorn's cycle does)."""
        return getattr(getattr(self._receive, "__self__", None), "transport", None)

    def _start(self) -> None:
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> Message:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                break
        self.left = True
        callback = self._on_leave
        if callback is not None:
            callback()
        return message


def abort_connection(receive: Receive) -> bool:
    """Drop the client's connection at once, unsent bytes included, when the server lets us reach
    its transport (uvicorn: ``receive`` is a method of the request cycle, which holds it; through a
    :class:`ClientWatch`, the server's ``receive`` it wraps). Returns whether it could."""
    owner = getattr(receive, "__self__", None)
    transport = getattr(owner, "transport", None)
    abort = getattr(transport, "abort", None)
    if abort is None:
        return False
    abort()
    return True
