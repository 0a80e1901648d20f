"""Noticing that an HTTP client went away, and dropping a connection that no longer drains.

ASGI tells an application that its client left only through ``receive()``: once the request body
has been delivered, the next ``receive()`` returns ``http.disconnect`` when the connection is lost.
:class:`ClientWatch` stands in for the server's ``receive``: it hands the body through untouched,
and once the last body message has been delivered it keeps one ``receive()`` pending in a single
task — the only extra task of a request. With :class:`DelayedWatches` (the hot path) that task is
created only for a request still running :data:`WATCH_DELAY_S` after its body was read: one
answered sooner never gets one (a task costs ~10 µs of CPU, a set entry well under one). When that
``receive()`` answers ``http.disconnect`` it calls the current callback (the hot path cancels the
handler; :class:`~hearth.api.event_stream.EventStreamResponse` ends its stream). Later callers of
:meth:`ClientWatch.receive` share the watcher's answer instead of racing it for the next message.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from typing import Any

from starlette.types import Message, Receive

__all__ = [
    "WATCH_DELAY_S",
    "ClientWatch",
    "DelayedWatches",
    "abort_connection",
    "bound_unsent_bytes",
    "server_transport",
]


#: How long after its body a request runs before its client is watched. Most gateway calls take
#: longer (the upstream), so they are watched all along but for this moment; one answered sooner
#: never costs a task. A client that leaves is noticed at most twice this late.
WATCH_DELAY_S = 0.01


class DelayedWatches:
    """Starts the watch of every request still running :data:`WATCH_DELAY_S` after its body was read.

    One timer for all requests of a loop (ticking only while some are pending), instead of a timer
    per request: adding and removing a request is a set operation. A request added between two ticks
    is started on the second, so between one and two delays after its body.
    """

    __slots__ = ("_handle", "_new", "_old")

    def __init__(self) -> None:
        self._new: set[ClientWatch] = set()
        self._old: set[ClientWatch] = set()
        self._handle: asyncio.TimerHandle | None = None

    def add(self, watch: ClientWatch) -> None:
        self._new.add(watch)
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(WATCH_DELAY_S, self._tick)

    def discard(self, watch: ClientWatch) -> None:
        self._new.discard(watch)
        self._old.discard(watch)

    def _tick(self) -> None:
        due, self._old, self._new = self._old, self._new, set()
        for watch in due:
            watch.start()
        self._handle = asyncio.get_running_loop().call_later(WATCH_DELAY_S, self._tick) if self._old else None


class ClientWatch:
    __slots__ = ("_body_read", "_delayed", "_on_leave", "_receive", "_watcher", "left")

    def __init__(self, receive: Receive, on_leave: Callable[[], object] | None = None,
                 delayed: DelayedWatches | None = None) -> None:
        self._receive = receive
        self._on_leave = on_leave
        self._delayed = delayed  # None: watch as soon as the body is read
        self._body_read = False
        self._watcher: asyncio.Task[Message] | None = None
        self.left = False  # the client is gone (True only before the response completed)

    async def receive(self) -> Message:
        if self._body_read:
            # After the body, the only message left is http.disconnect: wait for the watcher's.
            return await asyncio.shield(self.start())
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.left = True
        elif not message.get("more_body", False):
            self._body_read = True
            if self._delayed is not None:
                self._delayed.add(self)
            else:
                self.start()
        return message

    def on_disconnect(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback`` (instead of the previous one) when the client leaves, at once if it has
        left already; watching starts now (a body never read is then discarded). ``None``: nothing
        more to do when it leaves, and no watching starts any more."""
        self._on_leave = callback
        if callback is None:
            if self._delayed is not None:
                self._delayed.discard(self)
        elif self.left:
            callback()
        else:
            self.start()

    def start(self) -> asyncio.Task[Message]:
        """Watch now (if not yet): the task that returns the ``http.disconnect`` message."""
        watcher = self._watcher
        if watcher is None:
            watcher = self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return watcher

    def close(self) -> None:
        """Stop watching (the response is over)."""
        if self._delayed is not None:
            self._delayed.discard(self)
        watcher = self._watcher
        if watcher is not None and not watcher.done():
            watcher.cancel()

    @property
    def transport(self) -> Any:
        """The server's transport for this request when the server exposes it (uvicorn's cycle does)."""
        return server_transport(self._receive)

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


_LINGER_RESET = struct.pack("ii", 1, 0)
_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", None)


def server_transport(receive: Receive) -> Any:
    """The server's transport behind ``receive`` when the server lets us reach it (uvicorn: ``receive``
    is a method of the request cycle, which holds it; through a :class:`ClientWatch`, the server's
    ``receive`` it wraps), else ``None``."""
    return getattr(getattr(receive, "__self__", None), "transport", None)


def _setsockopt(transport: Any, level: int, option: int, value: int | bytes) -> None:
    get_extra_info = getattr(transport, "get_extra_info", None)
    sock = get_extra_info("socket") if get_extra_info is not None else None
    if sock is not None:
        with contextlib.suppress(OSError, AttributeError, TypeError):
            sock.setsockopt(level, option, value)


def abort_connection(receive: Receive) -> bool:
    """Drop the client's connection at once, unsent bytes included; returns whether it could.

    The socket lingers 0 s, so closing it resets the connection: the kernel's send buffer is freed
    too, instead of being trickled out to a client that does not read (a plain close would keep it,
    and the socket, until every byte was taken).
    """
    transport = server_transport(receive)
    abort = getattr(transport, "abort", None)
    if abort is None:
        return False
    _setsockopt(transport, socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    abort()
    return True


def bound_unsent_bytes(receive: Receive, limit: int) -> None:
    """Keep at most about ``limit`` not-yet-sent bytes in the kernel for this connection
    (``TCP_NOTSENT_LOWAT``, where the platform has it). Without it the kernel's send buffer grows
    by autotuning up to ``net.ipv4.tcp_wmem``'s maximum (4 MiB by default) for a client that does
    not read, and the server's own flow control only starts once that is full. Bytes in flight
    (sent, not yet acknowledged) are not counted, so throughput is not limited."""
    if _NOTSENT_LOWAT is not None:
        _setsockopt(server_transport(receive), socket.IPPROTO_TCP, _NOTSENT_LOWAT, limit)
