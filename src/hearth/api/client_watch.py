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
import contextlib
import socket
import struct
from collections.abc import Callable
from typing import Any

from starlette.types import Message, Receive

__all__ = ["ClientWatch", "abort_connection", "bound_unsent_bytes", "server_transport"]


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
        if callback is None:
            return
        if self.left:
            callback()
        elif self._watcher is None:
            self._start()

    def close(self) -> None:
        """Stop watching (the response is over)."""
        watcher = self._watcher
        if watcher is not None and not watcher.done():
            watcher.cancel()

    @property
    def transport(self) -> Any:
        """The server's transport for this request when the server exposes it (uvicorn's cycle does)."""
        return server_transport(self._receive)

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
