"""The HTTP/1.1 protocol ``hearth serve`` runs: uvicorn's httptools protocol with a bounded request head.

Why: uvicorn's httptools protocol (what ``http="auto"`` picks) enforces no limit on the request
line and headers at all — measured with uvicorn 0.54 / httptools 0.9, a 20 MB header was read,
buffered and handed to the application. Its h11 protocol bounds an *incomplete* head by
``h11_max_incomplete_event_size`` (16 KiB by default) and answers 400. So Hearth serves with a
subclass that counts the bytes of a request head while it arrives and, once they pass
:data:`MAX_REQUEST_HEAD_BYTES`, answers ``431 Request Header Fields Too Large`` and closes the
connection, before any of it reaches the application. With h11 (when httptools is not installed)
the same bound is configured as ``h11_max_incomplete_event_size``.

A head that arrives in one read is measured when the parser has it (URL plus header names and
values); a head still incomplete is counted per read, so a header dribbled in byte by byte, or one
huge header value, is refused within one read (asyncio reads at most 256 KiB) of passing the limit,
and never buffered beyond that. uvicorn logs its own "Invalid HTTP request received." next to
Hearth's warning for such a request.
"""

from __future__ import annotations

import asyncio
from itertools import chain
from typing import Any, Final

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

__all__ = ["MAX_REQUEST_HEAD_BYTES", "BoundedHttpToolsProtocol", "uvicorn_http_options"]

#: Request line plus all headers. Browsers send a few KiB; nginx allows 32 KiB by default, Node 16 KiB.
MAX_REQUEST_HEAD_BYTES: Final = 64 * 1024

_BODY: Final = b"Request header fields too large."
_LINGER_S: Final = 2.0  # how long a refused connection's input is still read (and dropped) before closing
_LINGER_BYTES: Final = 4 * 1024 * 1024  # ... and at most this much of it


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop httptools mid-chunk (it surfaces as an HttpParserError)."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request head above :data:`MAX_REQUEST_HEAD_BYTES`."""

    max_head_bytes: int = MAX_REQUEST_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._in_head = True  # waiting for (the rest of) a request head
        self._head_boundary = False  # a head or a message ended inside the current chunk
        self._refused = False
        self._discarded = 0
        self._linger: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if self._refused:  # lingering: read and drop what the client still sends, so it sees the 431
            self._discarded += len(data)
            if self._discarded > _LINGER_BYTES:
                self.transport.close()
            return
        self._head_boundary = False
        super().data_received(data)
        # A chunk in which a head or message ended is not counted: the parser does not say where in
        # the chunk that happened, and counting a body's tail as the next head would refuse good requests.
        if self._in_head and not self._head_boundary:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
                self._refuse_head()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_boundary = True
        self._head_bytes = 0
        # A head that arrived whole in one read is measured here, from what the parser collected.
        headers = self.headers
        size = len(self.url) + sum(map(len, chain.from_iterable(headers))) + 4 * len(headers)
        if size > self.max_head_bytes:
            self._refuse_head()
            raise _HeadTooLarge  # stops the parser; uvicorn then calls send_400_response, a no-op now
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if not self._refused:
            super().send_400_response(msg)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_boundary = True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def _refuse_head(self) -> None:
        """Answer 431 and close — after a short lingering read, as nginx does: closing a socket with
        unread input makes the kernel send a reset, and a client still sending its head would then
        lose the answer."""
        self._refused = True
        self.logger.warning("Request head larger than %d bytes refused (431).", self.max_head_bytes)
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a pipelined head behind a response still being sent: no room to answer
            return
        self.transport.write(b"".join([
            STATUS_LINE[431],
            *(name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers),
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: " + str(len(_BODY)).encode() + b"\r\n",
            b"connection: close\r\n\r\n", _BODY]))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger = self.loop.call_later(_LINGER_S, self.transport.close)


def uvicorn_http_options() -> dict[str, Any]:
    """The ``uvicorn.run``/``uvicorn.Config`` arguments that bound request heads (an import string, so
    it also works with ``workers > 1``)."""
    return {"http": f"{__name__}:BoundedHttpToolsProtocol", "h11_max_incomplete_event_size": MAX_REQUEST_HEAD_BYTES}
